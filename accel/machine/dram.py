"""DRAM images and the blocked tensor layouts the accelerator reads and writes.

The accelerator moves whole tiles, so tensors live in DRAM in blocked layouts:

- activations ``NCHW{b}n{c}c``: ``(N, C, H, W)`` becomes ``(N/b, C/c, H, W, b, c)``, where an
  ``(b, c)`` block is one inp tile (``b = batch``, ``c = block_in``) or one out/acc tile
  (``c = block_out``);
- weights ``OIHW{o}o{i}i``: ``(O, I, KH, KW)`` becomes ``(O/o, I/i, KH, KW, o, i)``, one wgt tile
  per ``(o, i)`` block.

Dimensions that are not a multiple of the block are zero-padded on packing and cropped on
unpacking. A :class:`Dram` is a growable byte image with named
:class:`~accel.machine.program.Region` s; :func:`place_program` puts a program's regions and
micro-ops into one, as every engine does before a run.
"""

from __future__ import annotations

import numpy as np

from accel.machine.isa import encode_uops
from accel.machine.program import Program, Region

__all__ = [
    "Dram",
    "DramError",
    "pack_activation",
    "pack_weight",
    "place_program",
    "unpack_activation",
    "unpack_weight",
]


class DramError(ValueError):
    """A region that does not exist, overlaps, or does not fit what is written to it."""


def _ceil_to(n: int, m: int) -> int:
    return -(-n // m) * m


def _pack_blocked(x: np.ndarray, b0: int, b1: int) -> np.ndarray:
    """``(A, B, H, W)`` -> ``(A/b0, B/b1, H, W, b0, b1)``, zero-padded: the blocking of both
    layouts (activations and weights)."""
    a, b, h, w = x.shape
    padded = np.zeros((_ceil_to(a, b0), _ceil_to(b, b1), h, w), dtype=x.dtype)
    padded[:a, :b] = x
    ab, bb = padded.shape[0] // b0, padded.shape[1] // b1
    return np.ascontiguousarray(
        padded.reshape(ab, b0, bb, b1, h, w).transpose(0, 2, 4, 5, 1, 3)
    )


def _unpack_blocked(xb: np.ndarray, shape: tuple[int, int, int, int]) -> np.ndarray:
    """Inverse of :func:`_pack_blocked`, cropped to ``shape``."""
    ab, bb, h, w, b0, b1 = xb.shape
    full = xb.transpose(0, 4, 1, 5, 2, 3).reshape(ab * b0, bb * b1, h, w)
    a, b, hh, ww = shape
    return np.ascontiguousarray(full[:a, :b, :hh, :ww])


def pack_activation(x: np.ndarray, batch: int, block: int) -> np.ndarray:
    """``(N, C, H, W)`` -> ``(N/batch, C/block, H, W, batch, block)``, zero-padded."""
    return _pack_blocked(x, batch, block)


def unpack_activation(xb: np.ndarray, shape: tuple[int, int, int, int]) -> np.ndarray:
    """Inverse of :func:`pack_activation`, cropped to ``shape`` ``(N, C, H, W)``."""
    return _unpack_blocked(xb, shape)


def pack_weight(w: np.ndarray, block_out: int, block_in: int) -> np.ndarray:
    """``(O, I, KH, KW)`` -> ``(O/block_out, I/block_in, KH, KW, block_out, block_in)``."""
    return _pack_blocked(w, block_out, block_in)


def unpack_weight(wb: np.ndarray, shape: tuple[int, int, int, int]) -> np.ndarray:
    """Inverse of :func:`pack_weight`, cropped to ``shape`` ``(O, I, KH, KW)`` (``O`` and ``I``
    only: the kernel's extent is the blocked array's)."""
    o, i, _, _ = shape
    return _unpack_blocked(wb, (o, i, *wb.shape[2:4]))


class Dram:
    """A byte-addressed DRAM image with named regions.

    Parameters
    ----------
    nbytes
        Initial size; :meth:`alloc` grows the image as needed.
    """

    def __init__(self, nbytes: int = 0) -> None:
        self._data = np.zeros(nbytes, dtype=np.uint8)
        self.regions: dict[str, Region] = {}

    @property
    def data(self) -> np.ndarray:
        """The whole image as a uint8 array (a view: writes go to DRAM)."""
        return self._data

    @property
    def nbytes(self) -> int:
        return len(self._data)

    def _grow(self, end: int) -> None:
        if end > len(self._data):
            grown = np.zeros(end, dtype=np.uint8)
            grown[: len(self._data)] = self._data
            self._data = grown

    def alloc(
        self,
        name: str,
        nbytes: int,
        align: int = 64,
        shape: tuple[int, ...] | None = None,
        dtype: str | None = None,
        layout: str | None = None,
    ) -> Region:
        """Allocate a new region at the end of the image, aligned to ``align`` bytes.

        Raises
        ------
        DramError
            The name is taken or the size is negative.
        """
        if name in self.regions:
            raise DramError(f"region {name!r} already exists")
        if nbytes < 0:
            raise DramError(f"region {name!r}: size must be >= 0 bytes, got {nbytes}")
        top = max((r.end for r in self.regions.values()), default=0)
        offset = _ceil_to(top, align)
        region = Region(name, offset, nbytes, shape, dtype, layout)
        self.add_region(region)
        return region

    def alloc_tensor(self, name: str, array: np.ndarray, layout: str | None = None,
                     align: int = 64) -> Region:
        """Allocate a region shaped like ``array`` and write ``array`` into it."""
        region = self.alloc(name, array.nbytes, align, tuple(array.shape), str(array.dtype),
                            layout)
        self.write(name, array)
        return region

    def add_region(self, region: Region) -> None:
        """Add a region at a fixed offset (e.g. from a program's layout).

        Raises
        ------
        DramError
            A different region of that name exists, or it overlaps another region.
        """
        old = self.regions.get(region.name)
        if old is not None:
            if old != region:
                raise DramError(f"region {region.name!r} already exists as {old}")
            return
        for other in self.regions.values():
            if region.nbytes and other.nbytes and region.offset < other.end \
                    and other.offset < region.end:
                raise DramError(
                    f"region {region.name!r} [{region.offset}, {region.end}) overlaps "
                    f"{other.name!r} [{other.offset}, {other.end})"
                )
        self.regions[region.name] = region
        self._grow(region.end)

    def _region(self, name: str) -> Region:
        try:
            return self.regions[name]
        except KeyError:
            raise DramError(
                f"no region {name!r}; regions are {', '.join(self.regions) or 'none'}"
            ) from None

    def raw(self, name: str) -> np.ndarray:
        """The region's bytes as a uint8 view."""
        r = self._region(name)
        return self._data[r.offset : r.end]

    def write(self, name: str, array: np.ndarray) -> None:
        """Copy ``array``'s bytes into region ``name`` (must fit).

        Raises
        ------
        DramError
            No such region, or ``array`` is larger than it.
        """
        r = self._region(name)
        raw = np.ascontiguousarray(array).view(np.uint8).reshape(-1)
        if raw.nbytes > r.nbytes:
            raise DramError(
                f"region {name!r} holds {r.nbytes} bytes, cannot write {raw.nbytes}"
            )
        self._data[r.offset : r.offset + raw.nbytes] = raw

    def read(self, name: str, dtype: str | None = None,
             shape: tuple[int, ...] | None = None) -> np.ndarray:
        """A copy of region ``name`` as ``dtype``/``shape`` (default: the region's own)."""
        r = self._region(name)
        dt = np.dtype(dtype or r.dtype or "uint8")
        arr = self.raw(name).view(dt).copy()
        target = shape if shape is not None else r.shape
        return arr.reshape(target) if target is not None else arr

    def copy(self) -> Dram:
        """An independent copy (data and regions)."""
        other = Dram()
        other._data = self._data.copy()
        other.regions = dict(self.regions)
        return other


def place_program(program: Program, dram: Dram) -> None:
    """Add ``program``'s regions to ``dram`` and write its micro-op table there.

    Raises
    ------
    DramError
        A region overlaps one of ``dram``'s that differs from it.
    """
    for region in program.regions.values():
        dram.add_region(region)
    if len(program.uops):
        assert program.uop_region is not None  # Program.validate checked it
        words = encode_uops(program.uops, program.config)
        dram.write(program.uop_region, words.astype(f"<u{program.config.uop_bytes}"))
