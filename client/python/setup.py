"""The gpubroker Python package: pure Python over libgpubroker's C ABI.

Plain setuptools, so that ``pip install client/python`` builds offline with
the setuptools the system has (no build isolation, nothing to download).
"""

from setuptools import setup

setup(
    name="gpubroker",
    version="0.1.0",
    description=(
        "Share GPU and host buffers between processes and frameworks with no copy "
        "(DLPack, CUDA Array Interface), through gpubrokerd"
    ),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.9",
    packages=["gpubroker"],
    package_data={"gpubroker": ["py.typed", "libgpubroker.so*"]},
    extras_require={"numpy": ["numpy"], "test": ["pytest", "numpy"]},
    classifiers=[
        "Programming Language :: Python :: 3",
        "Operating System :: POSIX :: Linux",
        "Typing :: Typed",
    ],
)
