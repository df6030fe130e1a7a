"""A small recorder that captures a PyTorch (or any array) implementation's quantities at
chosen steps into the dict :func:`tokensel.judge` takes. It never imports torch: a value
is converted by ``.detach().cpu().numpy()`` when it has ``detach`` (a tensor), by
:func:`numpy.asarray` otherwise, and copied, so later in-place updates do not change it.

In a training loop (``q = W.T @ p`` or ``q = p``; call ``q.retain_grad()`` before
``loss.backward()`` so that ``q.grad`` holds dL/dq)::

    rec = tokensel.torch.Recorder(steps=[0, 1, 10, 100, 1000])
    for t in range(steps + 1):
        ...forward: z = X @ q, s = softmax(z), f = (s * g).sum(1), loss; loss.backward()
        if rec.due(t):
            rec.record(t, p=p, scores=z, attention=s, output=f, loss=loss, grad_q=q.grad)
        ...update
    report = tokensel.judge(cfg, rec.to_dict())

The quantities are the external format's: ``p``, ``q``, ``W``, ``scores``, ``attention``,
``rest``, ``output``, ``loss``, ``grad_q``; every recorded step must carry the same ones.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

QUANTITIES = ("p", "q", "W", "scores", "attention", "rest", "output", "loss", "grad_q")


def to_numpy(value: Any) -> np.ndarray:
    """A tensor or array-like as a NumPy array of its own (a copy)."""
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.array(value, copy=True)


class Recorder:
    """Collects quantities at chosen steps (``steps``, or every ``every`` steps; all
    steps when neither is given) into the external-trajectory dict of
    :func:`tokensel.judge`. ``dtype`` (``"float32"`` or ``"float64"``) defaults to the
    first recorded array's; ``implementation`` names the code; ``config`` lists config
    keys the implementation used (seed, step_size, mode: checked against the data's)."""

    def __init__(
        self,
        steps: Iterable[int] | None = None,
        *,
        every: int | None = None,
        dtype: str | None = None,
        implementation: str | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        if steps is not None and every is not None:
            raise ValueError("give steps or every, not both")
        if every is not None and every < 1:
            raise ValueError(f"every must be at least 1, got {every}")
        self._steps = None if steps is None else frozenset(int(s) for s in steps)
        self._every = every
        self.dtype = dtype
        self.implementation = implementation
        self.config = dict(config or {})
        self._recorded: list[int] = []
        self._values: dict[str, list[np.ndarray]] = {}

    def due(self, step: int) -> bool:
        """Whether ``step`` is one to record."""
        if self._steps is not None:
            return step in self._steps
        if self._every is not None:
            return step % self._every == 0
        return True

    def record(self, step: int, **quantities: Any) -> None:
        """Record the given quantities at ``step`` (after ``step`` updates, the forward
        pass at those parameters). Steps must increase; every call must name the same
        quantities."""
        unknown = sorted(set(quantities) - set(QUANTITIES))
        if unknown:
            raise ValueError(f"unknown quantities {unknown} (known: {', '.join(QUANTITIES)})")
        if not quantities:
            raise ValueError("record at least one quantity")
        if self._recorded and step <= self._recorded[-1]:
            raise ValueError(f"steps must increase: {step} after {self._recorded[-1]}")
        if self._values and set(quantities) != set(self._values):
            raise ValueError(
                f"step {step} records {sorted(quantities)}, earlier steps {sorted(self._values)}"
            )
        arrays = {k: to_numpy(v) for k, v in quantities.items()}
        if self.dtype is None:
            self.dtype = np.result_type(*arrays.values()).name
        for k, a in arrays.items():
            self._values.setdefault(k, []).append(a)
        self._recorded.append(int(step))

    def to_dict(self) -> dict[str, Any]:
        """The dict :func:`tokensel.judge` takes: ``steps``, ``dtype``, the header keys
        given, and each quantity stacked along a first axis of steps."""
        if not self._recorded:
            raise ValueError("nothing recorded")
        out: dict[str, Any] = {"steps": np.array(self._recorded, dtype=np.int64), "dtype": self.dtype}
        if self.implementation is not None:
            out["implementation"] = self.implementation
        if self.config:
            out["config"] = self.config
        for k, values in self._values.items():
            out[k] = np.stack(values)
        return out
