"""Action counts: every action of the machine that costs energy, defined by what the RTL does.

The functional simulator counts them as it executes each instruction, the timing simulator
through the same calls (:class:`ActionCounts`), and the RTL's counters (``hw.activity``) count
the same events from the design's own signals; ``tests/test_energy_rtl.py`` checks that the
three agree exactly. Each count below names the RTL signal that counts it (paths under the
design's ``top``; a multi-bit enable counts its set bits).

Counted per instruction retired (:meth:`ActionCounts.add_insn`), from its fields alone:

- **macs**: ``batch * block_in * block_out`` per micro-op of a GEMM without ``reset``.
- **gemm_uops** / **gemm_reset_uops**: GEMM micro-ops issued without / with ``reset``
  (``compute.v1`` with ``compute.alu_q`` low and ``compute.reset_q`` low / high: ``v1`` marks
  the cycle after a micro-op's issue, stage 1).
- **alu_uops[op]**: ALU micro-ops issued, by operation (``compute.v1``, ``compute.alu_q`` high,
  ``compute.op_q`` the operation). Each operates on ``batch * block_out`` lanes.
- **reads[buffer]**, **writes[buffer]**: accesses of one element each (a tile, a micro-op word,
  an instruction), of the buffers ``insn`` (fetch's instruction buffer), ``uop``, ``inp``,
  ``wgt``, ``acc``, ``out``. The RTL's read ports are enabled every cycle; a read is counted
  only where its data is used, which is where a gated port would be enabled:

  - ``uop`` read: one per micro-op issued, GEMM (with or without reset) or ALU (``compute.v1``).
    The buffer is read a cycle ahead of each issue; the reads whose micro-op is not issued
    then (the read-ahead of an instruction that is not a GEMM or ALU, or that turns out not
    to be the one in front) are not counted.
  - ``inp`` and ``wgt`` read: one each per GEMM micro-op without reset, in stage 1 (the
    ``gemm_uops`` strobe).
  - ``acc`` read: per GEMM micro-op without reset, its destination (``compute.v4``, or
    ``compute.v5`` when the GEMM is deep, ``hw.params.gemm_deep``; ``alu_q`` and ``reset_q``
    low); per GEMM micro-op with ``reset`` and ``from_acc`` (``gemm.reset_from_acc``), its
    source, in the same stage (``reset_q`` and ``compute.from_acc_q`` high); per ALU
    micro-op, its destination (``compute.v3`` and ``alu_q``) and, without ``use_imm``, its
    source (``compute.v2``, ``alu_q``, ``compute.use_imm_q`` low).
  - ``acc`` write: one per GEMM or ALU micro-op (the write enable ``compute.w_valid``,
    counted a cycle ahead, as ``compute.wb_valid`` while ``compute.engine.writing_acc`` is
    low: the last result may be written after FINISH's cycle) and one per element LOAD ACC
    writes, padding included (``compute.w_load``'s lanes).
  - ``out`` write: one per GEMM or ALU micro-op (``compute.w_valid``, the out buffer's write
    enable, counted as for acc); ``out`` read: one per element a STORE OUT sends
    (``store.engine``: ``step`` elements in each cycle with ``sending`` and ``completes``, and
    with ``store.postproc``, ``post_q`` low).
  - ``acc_copy`` (``store.postproc``): a write with every acc write, counted as for acc
    (``compute.wr_acc_copy`` has the acc buffer's enables); a read per element a STORE ACC
    sends (as for ``out``, with ``store.engine.post_q`` high). The post-processing stream
    reads ahead and past the instruction's last element; those reads are not counted.
  - ``inp``, ``wgt``, ``uop`` write: one per element a LOAD writes, padding included
    (``load.wr_inp__en``, ``load.wr_wgt__en``, ``compute.engine.wr_uop__en``); a zero-size
    LOAD writes none.
  - ``insn`` write: per fetch transaction of ``k`` instructions, ``k`` writes, or, where a
    DRAM beat carries several instructions (``lanes = bytes_per_cycle // 16 > 1``),
    ``lanes`` per beat, every lane of every beat (``fetch.w_en``); ``insn`` read: one per
    instruction dispatched (``fetch.dispatch``).

- **cmd_pushes[module]**, **cmd_pops[module]**: instructions into and out of the load,
  compute and store command queues (``<module>_cmd_queue.w_fire`` / ``.r_fire``).
- **token_pushes[queue]**, **token_pops[queue]**: tokens into and out of ``l2c``, ``c2l``,
  ``c2s``, ``s2c`` (``<queue>_token_queue.pushed`` / ``.popped``), by the instruction's
  dependency flags. FINISH's pushes count: the RTL pushes them in its decode cycle, though the
  run ends there and nothing pops them.
- **insns**: instructions fetched and dispatched.
- **dram_read_bytes**, **dram_write_bytes**, **dram_read_txns**, **dram_write_txns**,
  **dram_beats**: DRAM transactions as granted (fetch's, one per batch of
  ``costs.fetch_batch_size`` instructions, and each LOAD's and STORE's bursts,
  ``memory.mem_bursts``), their bytes and data beats (the RTL's DRAM models count them).

Cycle counts are not here: a functional run has none. The timing simulator adds each module's
*active* cycles (from its decode cycle through its last, for every instruction; fetch's from
cycle 0 through its last dispatch), which the RTL counts as ``<module>.control.start`` plus
``<module>.control.executing``, and ``fetch.busy``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from accel.machine.config import HwConfig
from accel.machine.costs import fetch_batch_size
from accel.machine.isa import (
    DEP_QUEUES,
    INSN_BYTES,
    AluInsn,
    AluOp,
    GemmInsn,
    Insn,
    MemInsn,
    Module,
    TokenQueue,
    module_of,
)
from accel.machine.memory import beats, mem_bursts

__all__ = ["ALU_OPS", "BUFFERS", "CMD_QUEUES", "TOKEN_QUEUES", "ActionCounts", "buffer_bytes",
           "queue_name"]

BUFFERS = ("insn", "uop", "inp", "wgt", "acc", "out", "acc_copy")
"""The on-chip buffers whose accesses are counted (``acc_copy``: the store's copy of the acc
buffer, with ``store.postproc`` only)."""
CMD_QUEUES = tuple(m.name.lower() for m in Module)
TOKEN_QUEUES = tuple(q.name.lower() for q in TokenQueue)
ALU_OPS = tuple(op.name for op in AluOp)


def queue_name(queue: TokenQueue) -> str:
    """A token queue's short name (``l2c``, ``c2l``, ``c2s``, ``s2c``)."""
    return queue.name.lower()


def buffer_bytes(buffer: str, cfg: HwConfig) -> int:
    """Bytes of one element (one access) of ``buffer``: an instruction, a micro-op word or a
    tile."""
    if buffer == "insn":
        return INSN_BYTES
    return cfg.tile_bytes("acc" if buffer == "acc_copy" else buffer)


def _zeros(keys: tuple[str, ...]) -> dict[str, int]:
    return dict.fromkeys(keys, 0)


@dataclass
class ActionCounts:
    """Counts of the actions that cost energy (module docstring); every dict has all its keys.
    """

    macs: int = 0
    gemm_uops: int = 0
    gemm_reset_uops: int = 0
    alu_uops: dict[str, int] = field(default_factory=lambda: _zeros(ALU_OPS))
    reads: dict[str, int] = field(default_factory=lambda: _zeros(BUFFERS))
    writes: dict[str, int] = field(default_factory=lambda: _zeros(BUFFERS))
    insns: int = 0
    cmd_pushes: dict[str, int] = field(default_factory=lambda: _zeros(CMD_QUEUES))
    cmd_pops: dict[str, int] = field(default_factory=lambda: _zeros(CMD_QUEUES))
    token_pushes: dict[str, int] = field(default_factory=lambda: _zeros(TOKEN_QUEUES))
    token_pops: dict[str, int] = field(default_factory=lambda: _zeros(TOKEN_QUEUES))
    dram_read_bytes: int = 0
    dram_write_bytes: int = 0
    dram_read_txns: int = 0
    dram_write_txns: int = 0
    dram_beats: int = 0

    # ------------------------------------------------------------------ counting
    def add_fetch(self, n_insns: int, cfg: HwConfig) -> None:
        """Fetch of a program of ``n_insns`` instructions: its DRAM transactions and the
        instruction buffer's writes and reads."""
        batch = fetch_batch_size(cfg)
        lanes = cfg.dram.bytes_per_cycle // INSN_BYTES
        for first in range(0, n_insns, batch):
            k = min(batch, n_insns - first)
            n_beats = beats(k * INSN_BYTES, cfg)
            self.dram_read_txns += 1
            self.dram_read_bytes += k * INSN_BYTES
            self.dram_beats += n_beats
            self.writes["insn"] += n_beats * lanes if lanes > 1 else k
        self.reads["insn"] += n_insns
        self.insns += n_insns

    @classmethod
    def of_program(cls, insns: Sequence[Insn], cfg: HwConfig) -> ActionCounts:
        """The counts of a program run to FINISH: its fetch and every instruction once, as the
        functional simulator counts them (every instruction retires once, and no count
        depends on data or order). Each distinct instruction is counted once and scaled by
        how often it occurs."""
        from collections import Counter

        counts = cls()
        counts.add_fetch(len(insns), cfg)
        for insn, n in Counter(insns).items():
            one = cls()
            one.add_insn(insn, cfg)
            counts.add_scaled(one, n)
        return counts

    def add_scaled(self, other: ActionCounts, n: int) -> None:
        """Add ``n`` times ``other``'s counts to these."""
        for f in _FIELDS:
            mine, theirs = getattr(self, f), getattr(other, f)
            if isinstance(mine, dict):
                for k, v in theirs.items():
                    mine[k] = mine.get(k, 0) + n * v
            else:
                setattr(self, f, mine + n * theirs)

    def add_insn(self, insn: Insn, cfg: HwConfig) -> None:
        """One instruction retired: its queue traffic, buffer accesses, operations and DRAM
        transactions."""
        module = module_of(insn)
        name = module.name.lower()
        self.cmd_pushes[name] += 1
        self.cmd_pops[name] += 1
        for flag in insn.deps():
            queue = queue_name(DEP_QUEUES[(module, flag)])
            if flag.startswith("pop"):
                self.token_pops[queue] += 1
            else:
                self.token_pushes[queue] += 1
        if isinstance(insn, MemInsn):
            self._memory(insn, cfg)
        elif isinstance(insn, (GemmInsn, AluInsn)):
            self._loop(insn, cfg)

    def _memory(self, insn: MemInsn, cfg: HwConfig) -> None:
        elems = insn.sram_elems
        if not elems:
            return                          # a zero-size LOAD/STORE only carries tokens
        bursts = mem_bursts(insn, cfg)
        nbytes = sum(bursts)
        self.dram_beats += sum(beats(b, cfg) for b in bursts)
        if insn.store:
            self.reads["acc_copy" if insn.mem_type.buffer == "acc" else "out"] += elems
            self.dram_write_bytes += nbytes
            self.dram_write_txns += len(bursts)
        else:
            self.writes[insn.mem_type.buffer] += elems
            if insn.mem_type.buffer == "acc" and cfg.store.postproc:
                self.writes["acc_copy"] += elems
            self.dram_read_bytes += nbytes
            self.dram_read_txns += len(bursts)

    def _loop(self, insn: GemmInsn | AluInsn, cfg: HwConfig) -> None:
        n = insn.n_uops
        if not n:
            return
        self.reads["uop"] += n
        self.writes["acc"] += n
        self.writes["out"] += n
        if cfg.store.postproc:
            self.writes["acc_copy"] += n
        if isinstance(insn, GemmInsn):
            if insn.reset:
                self.gemm_reset_uops += n
                if insn.from_acc:
                    self.reads["acc"] += n
                return
            self.gemm_uops += n
            self.macs += n * cfg.batch * cfg.block_in * cfg.block_out
            self.reads["inp"] += n
            self.reads["wgt"] += n
            self.reads["acc"] += n
        else:
            self.alu_uops[insn.alu_op.name] += n
            self.reads["acc"] += n if insn.use_imm else 2 * n

    # ------------------------------------------------------------------ views
    @property
    def uops(self) -> int:
        """Micro-ops issued (GEMM with and without reset, and ALU)."""
        return self.gemm_uops + self.gemm_reset_uops + sum(self.alu_uops.values())

    def read_bytes(self, cfg: HwConfig) -> dict[str, int]:
        """Bytes read from each buffer."""
        return {b: n * buffer_bytes(b, cfg) for b, n in self.reads.items()}

    def write_bytes(self, cfg: HwConfig) -> dict[str, int]:
        """Bytes written to each buffer."""
        return {b: n * buffer_bytes(b, cfg) for b, n in self.writes.items()}

    def __add__(self, other: ActionCounts) -> ActionCounts:
        out = ActionCounts()
        for f in _FIELDS:
            a, b = getattr(self, f), getattr(other, f)
            setattr(out, f, {k: a[k] + b[k] for k in a} if isinstance(a, dict) else a + b)
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready counts (accesses; :meth:`read_bytes` gives bytes)."""
        return {f: dict(v) if isinstance(v := getattr(self, f), dict) else v for f in _FIELDS}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ActionCounts:
        """The counts :meth:`to_dict` gave (missing keys count 0)."""
        out = cls()
        for f in _FIELDS:
            if f not in data:
                continue
            current = getattr(out, f)
            if isinstance(current, dict):
                current.update({k: int(v) for k, v in data[f].items()})
            else:
                setattr(out, f, int(data[f]))
        return out


_FIELDS = tuple(ActionCounts.__dataclass_fields__)
