"""Networks: load a model (zoo name, ONNX file or graph), sample its inputs, compile it.

The functions behind :func:`accel.load_model`, :func:`accel.sample_inputs` and
:func:`accel.compile` (re-exported by :mod:`accel.api`), here so that the entry's other parts
(the sweep runner, :mod:`accel.dse`) reach them without importing the entry package.
"""

from __future__ import annotations

from typing import Any

from accel.machine.config import HwConfig, load_config

__all__ = ["compile_network", "load_model", "open_tuning_log", "sample_inputs"]


def load_model(model: Any, batch: int = 1, image_size: int | None = None,
               seq_len: int | None = None) -> Any:
    """A graph from a zoo name (``"resnet18"``), an ``.onnx`` path, or a graph (returned as is).

    ``batch`` sizes a zoo model, or an ONNX input's symbolic first dimension; ``image_size``
    (default 224) sizes a zoo model only: an ONNX file fixes its input shape.

    Raises
    ------
    compiler.graph.ir.GraphError
        Unknown model name, unreadable or invalid ONNX file, an ``image_size`` or ``seq_len``
        for a model that does not read it (ONNX files read neither; ResNets read the image
        size, BERTs the sequence length), a batch or size below 1.
    """
    from pathlib import Path

    from compiler.graph.ir import Graph, GraphError

    if isinstance(model, Graph):
        return model
    text = str(model)
    if text.endswith(".onnx") or Path(text).suffix == ".onnx":
        from compiler.graph.onnx_frontend import import_onnx

        for option, value in (("image_size", image_size), ("seq_len", seq_len)):
            if value is not None:
                raise GraphError(f"{text}: {option} applies to zoo models only; the input "
                                 "shape of an ONNX model is fixed by the file")
        return import_onnx(text, batch=batch)
    from compiler.graph.zoo import IMAGE_MODELS, ZOO, load_zoo

    # Each zoo model reads one size at most: an image side (the CNNs), a sequence length
    # (BERT); ViT is 224x224. A size it would not read is an error, not ignored.
    for option, value, readers in (("image_size", image_size, IMAGE_MODELS),
                                   ("seq_len", seq_len, tuple(m for m in ZOO
                                                              if m.startswith("bert")))):
        if value is not None and text in ZOO and text not in readers:
            raise GraphError(f"{text}: {option} applies to {', '.join(readers)} only, not "
                             f"to {text}")

    # None means the default; 0 is an error (the zoo says so), not the default.
    return load_zoo(text, batch=batch, image_size=224 if image_size is None else image_size,
                    seq_len=128 if seq_len is None else seq_len)


def sample_inputs(graph: Any, seed: Any = 0, calibration_samples: int = 8
                  ) -> tuple[Any, list[dict[str, Any]] | None]:
    """A random input for ``graph``'s first input, and calibration samples when it is float.

    int8 graphs (the zoo) get uniform int8 values; float graphs (ONNX) get standard normal
    values, plus ``calibration_samples`` more of them for quantisation. Deterministic in
    ``seed`` (anything ``numpy.random.default_rng`` takes). Returns ``(x, calibration)`` with
    ``calibration`` None for int8 graphs.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    name = graph.inputs[0]
    t = graph.values[name]
    if np.dtype(t.dtype).kind in "iu" and t.dtype != "int8":  # token ids
        lo, hi = graph.attrs.get("input_range", {}).get(name, (0, 128))
        return rng.integers(lo, hi, t.shape).astype(t.dtype), None
    if t.dtype == "float32":
        x = rng.standard_normal(t.shape).astype(np.float32)
        return x, [{name: rng.standard_normal(t.shape).astype(np.float32)}
                   for _ in range(calibration_samples)]
    return rng.integers(-128, 128, t.shape, dtype=np.int8), None


def compile_network(
    model: Any, config: HwConfig | str | None = None, batch: int = 1,
    image_size: int | None = None, calibration: Any = None, knobs: dict[str, Any] | None = None,
    seq_len: int | None = None, tuning_log: Any = None, progress: Any = None,
) -> Any:
    """Compile a network for ``config``: graph passes, partitioning, per-layer programs.

    Parameters
    ----------
    model
        A zoo name (``"resnet18"``), an ``.onnx`` path, or a :class:`compiler.graph.ir.Graph`.
    config
        The hardware (default: the packaged default).
    batch, image_size, seq_len
        For zoo models (``seq_len``: the BERT models' tokens, 128 by default).
    calibration
        Sample float inputs for quantising a float (ONNX) model.
    knobs
        Per-node schedule knobs (node name -> knobs); they take precedence over the log.
    tuning_log
        A tuning log (path or :class:`compiler.ops.tuning_log.TuningLog`) written by
        ``accel tune``: every conv2d and dense layer it holds records for (same config, same
        signature) is compiled with its fastest logged knobs; the others get the heuristic's.
    progress
        ``progress(k, n, name)`` before compiling each of the ``n`` accelerator layers, and
        with ``k == n`` at the end.

    Returns
    -------
    runtime.executable.Executable
        ``outputs, report = exe.run(x, backend="sim", fallback="cpu")``.

    Raises
    ------
    compiler.ops.tuning_log.TuningLogError
        ``tuning_log`` names no file, or cannot be read.
    """
    from compiler.graph.passes import optimize
    from runtime.executable import Executable

    cfg = load_config(config) if not isinstance(config, HwConfig) else config
    log = open_tuning_log(tuning_log)
    graph = load_model(model, batch=batch, image_size=image_size, seq_len=seq_len)
    graph = optimize(graph, cfg, calibration=calibration)
    return Executable(graph, cfg, knobs=knobs, tuning_log=log, progress=progress)


def open_tuning_log(log: Any) -> Any:
    """``log`` as a :class:`compiler.ops.tuning_log.TuningLog` (None stays None); a path must
    name an existing file."""
    if log is None:
        return None
    from compiler.ops.tuning_log import TuningLog, TuningLogError

    if isinstance(log, TuningLog):
        return log
    out = TuningLog(log)
    if not out.path.is_file():
        raise TuningLogError(f"{out.path}: no such tuning log")
    return out
