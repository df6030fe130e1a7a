"""A small recorder that captures a PyTorch (or any array) implementation's quantities at
chosen steps into the dict :func:`tokensel.judge` takes. It never imports torch: a value
is converted by ``.detach().cpu().numpy()`` when it has ``detach`` (a tensor), by
:func:`numpy.asarray` otherwise, and copied, so later in-place updates do not change it.

In a training loop (``q = W.T @ p`` or ``q = p``; call ``q.retain_grad()`` before
``loss.backward()`` so that ``q.grad`` holds dL/dq)::

    rec = tokensel.torch.Recorder(every=10, last=steps)   # or steps=[0, 1, 10, ...]
    for t in range(steps + 1):
        ...forward: z = X @ q, s = softmax(z), f = (s * g).sum(1), loss; loss.backward()
        if rec.due(t):
            rec.record(t, p=p, scores=z, attention=s, output=f, loss=loss, grad_q=q.grad)
        ...update
    report = tokensel.judge(cfg, rec.to_dict())

The quantities are the external format's: ``p``, ``q``, ``W``, ``scores``, ``attention``,
``rest``, ``output``, ``loss``, ``grad_q``. A quantity is recorded at the steps it is given
at: ``rec.record(t, p=p)`` at every step and ``rec.record(t, p=p, W=W)`` at every 10th
records W sparser than p (``due(t, every=10)`` tells those steps; the first record names
every quantity); the dict then lists W's own steps as ``W_steps``, and the judge compares
each quantity at its own steps.
The dtype is taken from the arrays (never from 0-d values or Python scalars such as
``loss.item()``), and arrays of two float widths are refused; ``None`` (e.g. ``q.grad``
without ``q.retain_grad()``) is refused when it is recorded.
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
    """Collects quantities at chosen steps (``steps``, or every ``every`` steps and the
    ``last`` one; all steps when neither is given) into the external-trajectory dict of
    :func:`tokensel.judge`. ``dtype`` (``"float32"`` or ``"float64"``) defaults to the
    recorded arrays' (of one or more dimensions; they must share it); ``implementation``
    names the code; ``config`` lists config keys the implementation used (seed,
    step_size, mode: checked against the data's)."""

    def __init__(
        self,
        steps: Iterable[int] | None = None,
        *,
        every: int | None = None,
        last: int | None = None,
        dtype: str | None = None,
        implementation: str | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        if steps is not None and every is not None:
            raise ValueError("give steps or every, not both")
        if every is not None and every < 1:
            raise ValueError(f"every must be at least 1, got {every}")
        if every is not None and last is None:
            raise ValueError(
                "give last= (the run's final step) with every=: the last step is always "
                "recorded, also where every does not divide it"
            )
        if last is not None and every is None:
            raise ValueError("last= goes with every=")
        if dtype is not None and dtype not in ("float32", "float64"):
            raise ValueError(f"dtype must be \"float32\" or \"float64\", got {dtype!r}")
        self._steps = None if steps is None else frozenset(int(s) for s in steps)
        self._every = every
        self._last = last
        self.dtype = dtype
        self.implementation = implementation
        self.config = dict(config or {})
        self._recorded: list[int] = []
        self._values: dict[str, list[np.ndarray]] = {}
        self._steps_of: dict[str, list[int]] = {}

    def due(self, step: int, every: int | None = None) -> bool:
        """Whether ``step`` is one to record (with ``every``: a multiple of it, or
        ``last``). ``every=`` here picks the steps of a quantity recorded sparser than
        the others: the recorder's due steps that are multiples of it, and ``last``
        (``due(t, every=10)`` with ``Recorder(every=1, last=N)``: 0, 10, ..., N)."""
        if every is not None:
            if every < 1:
                raise ValueError(f"every must be at least 1, got {every}")
            return self.due(step) and (step % every == 0 or step == self._last)
        if self._steps is not None:
            return step in self._steps
        if self._every is not None:
            return step % self._every == 0 or step == self._last
        return True

    def record(self, step: int, **quantities: Any) -> None:
        """Record the given quantities at ``step`` (after ``step`` updates, the forward
        pass at those parameters). Steps must increase; the first call names every
        quantity to be recorded, later ones any of them: a quantity not given at a step
        is not recorded there (its own steps become ``<name>_steps`` in
        :meth:`to_dict`); no value may be ``None``; the arrays of one or more dimensions give
        the dtype (a float32 and a float64 array are refused, 0-d values and Python
        scalars such as ``loss.item()`` do not count)."""
        unknown = sorted(set(quantities) - set(QUANTITIES))
        if unknown:
            raise ValueError(f"unknown quantities {unknown} (known: {', '.join(QUANTITIES)})")
        if not quantities:
            raise ValueError("record at least one quantity")
        for k, v in quantities.items():
            if v is None:
                remedy = (
                    ": call q.retain_grad() before loss.backward(), so that q.grad holds dL/dq"
                    if k == "grad_q"
                    else ""
                )
                raise ValueError(f"`{k}` at step {step} is None{remedy}")
        if self._recorded and step <= self._recorded[-1]:
            raise ValueError(f"steps must increase: {step} after {self._recorded[-1]}")
        if self._values and not set(quantities) <= set(self._values):
            raise ValueError(
                f"step {step} records {sorted(quantities)}, the first step {sorted(self._values)}: "
                "the first record names every quantity, later ones any of them"
            )
        arrays = {k: to_numpy(v) for k, v in quantities.items()}
        for k, a in arrays.items():
            if a.dtype.kind not in "fiu":
                raise ValueError(
                    f"`{k}` at step {step} is not a real number array (dtype {a.dtype})"
                )
        widths = {
            a.dtype.name for a in arrays.values() if a.ndim >= 1 and a.dtype.kind == "f"
        }
        if self.dtype is not None:
            widths.add(self.dtype)
        if len(widths) > 1:
            names = {k: a.dtype.name for k, a in arrays.items() if a.ndim >= 1}
            raise ValueError(
                f"step {step}: arrays of different float widths {names}"
                + (f" (the recorder's dtype is {self.dtype})" if self.dtype else "")
                + ": record what the implementation computed, in one dtype"
            )
        if self.dtype is None and widths:
            (self.dtype,) = widths
            if self.dtype not in ("float32", "float64"):
                raise ValueError(f"arrays of {self.dtype}: the external format takes float32 or float64")
        for k, a in arrays.items():
            self._values.setdefault(k, []).append(a)
            self._steps_of.setdefault(k, []).append(int(step))
        self._recorded.append(int(step))

    def to_dict(self) -> dict[str, Any]:
        """The dict :func:`tokensel.judge` takes: ``steps``, ``dtype``, the header keys
        given, and each quantity stacked along a first axis of its steps, with
        ``<name>_steps`` for a quantity recorded at fewer steps than ``steps``."""
        if not self._recorded:
            raise ValueError("nothing recorded")
        if self.dtype is None:
            raise ValueError(
                "no array of one or more dimensions recorded to take the dtype from: give dtype="
            )
        out: dict[str, Any] = {"steps": np.array(self._recorded, dtype=np.int64), "dtype": self.dtype}
        if self.implementation is not None:
            out["implementation"] = self.implementation
        if self.config:
            out["config"] = self.config
        for k, values in self._values.items():
            out[k] = np.stack(values)
            if self._steps_of[k] != self._recorded:
                out[f"{k}_steps"] = np.array(self._steps_of[k], dtype=np.int64)
        return out
