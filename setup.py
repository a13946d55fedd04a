"""taco-fairseq: TACO (token-alignment contrastive objective) pre-training as a fairseq plugin."""

from setuptools import find_packages, setup

setup(
    name="taco-fairseq",
    version="0.1.0",
    description=(
        "Pre-train BERT/RoBERTa encoders with TACO (Fu et al., ACL 2022) in fairseq, "
        "then fine-tune them on GLUE"
    ),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    # the plugin and its tools; benchmarks/ is a development tool of the repository
    packages=find_packages(include=["taco_fairseq", "taco_fairseq.*"]),
    # the hydra recipes (examples/taco/config links to them), read by taco-glue and taco-compare
    package_data={"taco_fairseq": ["config/*/*.yaml"]},
    install_requires=[
        "torch==2.13.0",
        # fairseq's main branch packaged for Python 3.11/3.12 (it imports as fairseq; official
        # fairseq==0.12.2 neither installs with current pip nor imports on Python >= 3.11)
        "ve-fairseq==0.12.3",
        "hydra-core==1.3.8",
        "omegaconf==2.3.1",
        "numpy==2.4.6",
        "sentencepiece==0.2.3",
        "tqdm==4.70.1",
        # GLUE metrics (taco_fairseq.glue.metrics)
        "scikit-learn==1.9.1",
        "scipy==1.17.1",
    ],
    entry_points={
        "console_scripts": [
            "taco-prepare-data = taco_fairseq.cli.prepare_data:main",
            "taco-prepare-glue = taco_fairseq.cli.prepare_glue:main",
            "taco-download-glue = taco_fairseq.cli.glue_download:main",
            "taco-glue = taco_fairseq.cli.glue:main",
            "taco-glue-sweep = taco_fairseq.cli.glue_sweep:main",
            "taco-glue-summary = taco_fairseq.cli.glue_summary:main",
            "taco-predict-glue = taco_fairseq.cli.glue_predict:main",
            "taco-compare = taco_fairseq.cli.compare:main",
            "taco-analyze-context = taco_fairseq.cli.contextual_score:main",
            "taco-analyze-wordsim = taco_fairseq.cli.embedding_similarity:main",
            "taco-analyze-dynamics = taco_fairseq.cli.learning_dynamics:main",
            "taco-analyze-log = taco_fairseq.cli.training_log:main",
            "taco-analyze-probes = taco_fairseq.cli.probes:main",
            "taco-export-hf = taco_fairseq.cli.export_hf:main",
        ],
    },
    extras_require={
        "test": ["pytest==9.2.0", "pytest-xdist==3.8.0", "hypothesis==6.170.17"],
        "plot": ["matplotlib==3.11.2"],
        # taco-export-hf and taco_fairseq.hf_export (HuggingFace transformers export)
        "hf": ["transformers==5.24.0", "tokenizers==0.23.3", "safetensors==0.8.0"],
        # fairseq-train --tensorboard-logdir (fairseq writes through torch.utils.tensorboard,
        # which needs tensorboard; tensorboardX silences fairseq's "Please install tensorboardX")
        "tensorboard": ["tensorboard==2.21.0", "tensorboardX==2.6.5"],
        # the analyses of docs/analysis.md (figures also need "plot")
        "analysis": ["sentencex==1.0.32"],
    },
)
