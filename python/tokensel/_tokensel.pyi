"""Type stubs of the compiled extension (the package's functions wrap these)."""

from typing import Any

import numpy as np

DEFAULT_PREC: int
DEFAULT_BALL_PREC: int
__version__: str

class Config:
    """One run's description: a preset with keyword overrides, validated on construction.

    ``model="multiclass", classes=K`` is the shorthand of ``model={"kind": "multiclass",
    "classes": K}``; ``cfg.model`` is always the section (also when it is the default).
    """

    def __init__(self, preset: str | None = None, **overrides: Any) -> None: ...
    @staticmethod
    def from_toml(text: str, preset: str | None = None) -> Config: ...
    def replace(self, **overrides: Any) -> Config: ...
    def to_toml(self) -> str: ...
    def to_json(self) -> str: ...
    def to_dict(self) -> dict[str, Any]: ...
    def __getattr__(self, name: str) -> Any: ...

def data(config: Config) -> dict[str, np.ndarray]: ...
def run(
    config: Config,
    arithmetic: str = "f64",
    prec: int | None = None,
    data: dict[str, Any] | None = None,
) -> tuple[str, str, dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]: ...
def judge(
    config: Config,
    trajectory: dict[str, Any],
    prec: int = ...,
    tol: float = ...,
    data: dict[str, Any] | None = None,
    enclosure: int | None = ...,
) -> tuple[str, str]: ...
def format_judge(report: str) -> str: ...
def compare(
    config: Config,
    prec: int = ...,
    tol: float = ...,
    predictor: bool = ...,
    twin_method: str = ...,
    data: dict[str, Any] | None = None,
    predictor_steps: int | None = ...,
    certify: int | None = ...,
) -> str: ...
def svm(config: Config, pattern: str | list[int], data: dict[str, Any] | None = None) -> str: ...
def protocol(config: Config, data: dict[str, Any] | None = None) -> str: ...
def certify(
    config: Config,
    prec: int | None = ...,
    method: str = ...,
    data: dict[str, Any] | None = None,
) -> str: ...
def write_data(directory: str, config: Config, data: dict[str, Any] | None = None) -> str: ...
