"""The accelerator as an SoC block: an AXI4 master for DRAM and an AXI4-Lite slave for control.

:class:`AxiAccelerator` wraps :class:`hw.top.Accelerator` (built with its ``status`` ports)
and has the port names IP integrators recognise: ``aclk``, ``aresetn`` (active low,
synchronous), ``m_axi_*`` (AXI4, data ``dram.bytes_per_cycle`` bytes wide, ID
``dram.axi_id_bits`` wide), ``s_axi_*`` (AXI4-Lite, 32-bit data, 12-bit address) and
``interrupt`` (active high, level). ``accel verilog --axi`` writes it.

**Control** (:class:`AxiLiteRegs`): the register map of :mod:`accel.machine.regmap`, from which
the decoder is built register by register. A write takes its address and data together (the
slave waits for both ``awvalid`` and ``wvalid``); a read answers in the cycle after its address.
A bad access (no register at the address, a write to a read-only register, ``START`` while
busy) answers ``SLVERR`` and changes nothing.

**DRAM** (:class:`AxiDramBridge`): each transaction of the accelerator's channel
(:mod:`hw.dram`: byte address, up to ``dram.max_burst`` bytes, its beats in grant order) is one
INCR burst of full-width beats from the aligned address below it, or two where it crosses a 4 KB
boundary (AXI forbids a burst that does). The channel's beat ``j`` carries the bytes ``addr + j
* bpc ..``; an AXI beat carries an aligned word, so for an address off the beat (``o = addr %
bpc`` bytes) the bridge realigns: a read's channel beat ``j`` is formed from AXI beats ``j`` and
``j + 1`` (in the cycle the second arrives; the last, where it needs the first alone, in the
cycle after), a write's AXI beat ``k`` from channel beats ``k - 1`` and ``k``, with ``wstrb``
masking the bytes outside the transaction. The bridge's side of the channel is registered both
ways, so that its logic adds nothing to the accelerator's paths: a read beat reaches the
accelerator a cycle after it arrives, and write beats are taken from the accelerator into a
four-beat FIFO by a strobe decided a cycle ahead (never in a cycle that delivers a read beat),
ahead of the W channel. Addresses go out from registers, loaded as an entry leaves the
address queue (a cycle after its grant at the earliest), up to
``dram.max_outstanding`` transactions in flight (the arbiter's bound), all with ID 0, so the
slave returns reads in order and write responses in order; the data phases follow the channel's
order: a write's W beats wait for the reads granted before it, and the other way round. A
response other than OKAY sets ``STATUS.DRAM_ERROR`` (the data go on as they came).
"""

from __future__ import annotations

from amaranth.hdl import Cat, ClockDomain, ClockSignal, Const, Module, Mux, ResetSignal, Signal
from amaranth.lib import data, fifo, wiring
from amaranth.lib.wiring import In, Out

from accel.machine import regmap
from accel.machine.config import HwConfig
from hw.dram import DramPort, dram_port
from hw.params import RtlParams
from hw.top import Accelerator

__all__ = ["AXI_BOUNDARY", "AxiAccelerator", "AxiDramBridge", "AxiLiteRegs", "axi_limits",
           "m_axi_members", "s_axi_members"]

AXI_BOUNDARY = 4096
"""No AXI burst crosses a multiple of this many bytes."""

LITE_ADDR_BITS = 12
"""Address width of the AXI4-Lite slave (the register window, ``regmap.WINDOW_BYTES``)."""

OKAY, SLVERR = 0b00, 0b10

_CACHE_NORMAL = 0b0011
"""``AxCACHE``: normal, non-cacheable, bufferable (what Xilinx's HP ports expect)."""


def axi_limits(cfg: HwConfig) -> None:
    """Check that ``cfg``'s DRAM channel fits AXI4.

    Raises
    ------
    ValueError
        The data bus is wider than 1024 bits, a transaction could need more than 256 beats, or
        ``dram.max_burst`` exceeds 4 KB (a transaction would cross more than one boundary).
    """
    d = cfg.dram
    if d.bytes_per_cycle > 128:
        raise ValueError(f"{cfg.name}: dram.bytes_per_cycle {d.bytes_per_cycle}: AXI data is "
                         "at most 1024 bits (128 bytes)")
    if d.max_burst > AXI_BOUNDARY:
        raise ValueError(f"{cfg.name}: dram.max_burst {d.max_burst}: the AXI wrapper takes at "
                         f"most {AXI_BOUNDARY} bytes (one 4 KB boundary per transaction)")
    if d.max_burst // d.bytes_per_cycle + 1 > 256:
        raise ValueError(f"{cfg.name}: dram.max_burst {d.max_burst} over {d.bytes_per_cycle}-byte "
                         "beats: an unaligned transaction would need more than 256 AXI beats")


def axi_addr_bits(p: RtlParams) -> int:
    """Width of ``m_axi_araddr``/``awaddr``: 32, or 64 where the DRAM addresses need more."""
    return 32 if p.dram_addr_bits <= 32 else 64


def m_axi_members(p: RtlParams) -> dict[str, object]:
    """The AXI4 master's ports, ``m_axi_*``, seen from the master."""
    a, d, i = axi_addr_bits(p), p.beat_bits, p.cfg.dram.axi_id_bits
    out: dict[str, object] = {}
    for ch in ("aw", "ar"):
        out |= {f"{ch}id": Out(i), f"{ch}addr": Out(a), f"{ch}len": Out(8), f"{ch}size": Out(3),
                f"{ch}burst": Out(2), f"{ch}lock": Out(1), f"{ch}cache": Out(4),
                f"{ch}prot": Out(3), f"{ch}qos": Out(4), f"{ch}valid": Out(1),
                f"{ch}ready": In(1)}
    out |= {"wdata": Out(d), "wstrb": Out(d // 8), "wlast": Out(1), "wvalid": Out(1),
            "wready": In(1),
            "bid": In(i), "bresp": In(2), "bvalid": In(1), "bready": Out(1),
            "rid": In(i), "rdata": In(d), "rresp": In(2), "rlast": In(1), "rvalid": In(1),
            "rready": Out(1)}
    return {f"m_axi_{k}": v for k, v in out.items()}


def s_axi_members() -> dict[str, object]:
    """The AXI4-Lite slave's ports, ``s_axi_*``, seen from the slave."""
    d = 8 * regmap.DATA_BYTES
    out = {"awaddr": In(LITE_ADDR_BITS), "awprot": In(3), "awvalid": In(1), "awready": Out(1),
           "wdata": In(d), "wstrb": In(d // 8), "wvalid": In(1), "wready": Out(1),
           "bresp": Out(2), "bvalid": Out(1), "bready": In(1),
           "araddr": In(LITE_ADDR_BITS), "arprot": In(3), "arvalid": In(1), "arready": Out(1),
           "rdata": Out(d), "rresp": Out(2), "rvalid": Out(1), "rready": In(1)}
    return {f"s_axi_{k}": v for k, v in out.items()}


class AxiLiteRegs(wiring.Component):
    """The register map of :mod:`accel.machine.regmap` behind an AXI4-Lite slave.

    Ports
    -----
    s_axi_* : the slave (:func:`s_axi_members`).
    start : Out
        A one-cycle pulse: ``CTRL.START`` was written while idle.
    insn_addr, insn_count : Out
        ``INSN_ADDR_HI:INSN_ADDR_LO`` (cut to ``addr_bits``) and ``INSN_COUNT``.
    dram_base : Out
        ``DRAM_BASE_HI:DRAM_BASE_LO`` with bits 11:0 cleared, cut to ``base_bits``.
    done, dram_error : In
        ``STATUS.DONE`` and ``STATUS.DRAM_ERROR``.
    counters : In
        The 64-bit counters of ``regmap.COUNTERS``, in that order.
    interrupt : Out
        ``IRQ_STATUS & IRQ_ENABLE`` is non-zero (registered).
    """

    def __init__(self, addr_bits: int, base_bits: int) -> None:
        super().__init__({
            **s_axi_members(),
            "start": Out(1),
            "dram_base": Out(base_bits),
            "insn_addr": Out(addr_bits),
            "insn_count": Out(32),
            "done": In(1),
            "dram_error": In(1),
            "counters": In(data.ArrayLayout(64, len(regmap.COUNTERS))),
            "interrupt": Out(1),
        })

    def elaborate(self, platform: object) -> Module:
        m = Module()
        regs = regmap.REGISTERS
        word = 8 * regmap.DATA_BYTES
        stored = {r.name: Signal(word, name=f"reg_{r.name.lower()}")
                  for r in regs if r.access in ("rw", "w1c")}
        busy = Signal()
        done_q = Signal()
        hi_latch = [Signal(32, name=f"hi_{name.lower()}") for name, _ in regmap.COUNTERS]
        m.d.comb += [
            self.insn_addr.eq(Cat(stored["INSN_ADDR_LO"], stored["INSN_ADDR_HI"])),
            self.insn_count.eq(stored["INSN_COUNT"]),
            self.dram_base.eq(Cat(Const(0, 12), stored["DRAM_BASE_LO"][12:],
                                  stored["DRAM_BASE_HI"])),
        ]
        irq = regmap.register("IRQ_STATUS").field("DONE")
        m.d.sync += [
            done_q.eq(self.done),
            self.interrupt.eq((stored["IRQ_STATUS"] & stored["IRQ_ENABLE"]).any()),
        ]

        # The read value of every register.
        status = regmap.register("STATUS")
        value: dict[str, object] = {}
        for r in regs:
            if r.name in stored:
                value[r.name] = stored[r.name]
            elif r.name == "STATUS":
                v = Signal(word, name="status_value")
                m.d.comb += [v[status.field("DONE").lsb].eq(self.done & ~busy),
                             v[status.field("BUSY").lsb].eq(busy),
                             v[status.field("DRAM_ERROR").lsb].eq(self.dram_error)]
                value[r.name] = v
            elif r.name == "ID":
                value[r.name] = Const(regmap.ID_MAGIC, word)
            elif r.access == "wo":
                value[r.name] = Const(0, word)
        for i, (name, _) in enumerate(regmap.COUNTERS):
            value[f"{name}_LO"] = self.counters[i][:32]
            value[f"{name}_HI"] = hi_latch[i]
        missing = [r.name for r in regs if r.name not in value]
        assert not missing, f"no read value for {missing}"

        # Reads: the address is taken when no answer is pending; the answer the cycle after.
        s = self
        m.d.comb += s.s_axi_arready.eq(~s.s_axi_rvalid)
        with m.If(s.s_axi_rvalid & s.s_axi_rready):
            m.d.sync += s.s_axi_rvalid.eq(0)
        with m.If(s.s_axi_arvalid & s.s_axi_arready):
            index = s.s_axi_araddr[2:]
            m.d.sync += [s.s_axi_rvalid.eq(1), s.s_axi_rresp.eq(SLVERR), s.s_axi_rdata.eq(0)]
            with m.Switch(index):
                for r in regs:
                    with m.Case(r.offset // regmap.DATA_BYTES):
                        m.d.sync += [s.s_axi_rresp.eq(OKAY), s.s_axi_rdata.eq(value[r.name])]
                        if r.name.endswith("_LO") and r.name[:-3] in dict(regmap.COUNTERS):
                            i = [n for n, _ in regmap.COUNTERS].index(r.name[:-3])
                            m.d.sync += hi_latch[i].eq(self.counters[i][32:])

        # Writes: address and data together, the answer the cycle after.
        m.d.comb += self.start.eq(0)
        both = Signal()
        m.d.comb += [both.eq(s.s_axi_awvalid & s.s_axi_wvalid & ~s.s_axi_bvalid),
                     s.s_axi_awready.eq(both), s.s_axi_wready.eq(both)]
        with m.If(s.s_axi_bvalid & s.s_axi_bready):
            m.d.sync += s.s_axi_bvalid.eq(0)
        strobe_bits = Cat(*(b.replicate(8) for b in s.s_axi_wstrb))
        wdata = s.s_axi_wdata
        start_bit = regmap.register("CTRL").field("START")
        with m.If(both):
            m.d.sync += [s.s_axi_bvalid.eq(1), s.s_axi_bresp.eq(SLVERR)]
            with m.Switch(s.s_axi_awaddr[2:]):
                for r in regs:
                    with m.Case(r.offset // regmap.DATA_BYTES):
                        if r.access == "rw":
                            reg = stored[r.name]
                            m.d.sync += [reg.eq((reg & ~strobe_bits) | (wdata & strobe_bits)),
                                         s.s_axi_bresp.eq(OKAY)]
                        elif r.access == "w1c":
                            reg = stored[r.name]
                            m.d.sync += [reg.eq(reg & ~(wdata & strobe_bits)),
                                         s.s_axi_bresp.eq(OKAY)]
                        elif r.name == "CTRL":
                            go = wdata[start_bit.lsb] & strobe_bits[start_bit.lsb]
                            with m.If(~(go & busy)):
                                m.d.sync += s.s_axi_bresp.eq(OKAY)
                            with m.If(go & ~busy):
                                m.d.comb += self.start.eq(1)
                                m.d.sync += busy.eq(1)
                        # ``ro``: SLVERR, as set above.
        # The run's end (after the writes: it wins over a clear in the same cycle).
        with m.If(self.done & ~done_q):
            m.d.sync += [busy.eq(0), stored["IRQ_STATUS"][irq.lsb].eq(1)]
        return m


class AxiDramBridge(wiring.Component):
    """The accelerator's DRAM channel as an AXI4 master (module docstring).

    Ports
    -----
    dram : In(DramPort)
        The channel, from the accelerator's arbiter.
    m_axi_* : the master (:func:`m_axi_members`).
    base : In
        Added to every address (``DRAM_BASE``, 4 KB aligned).
    rd_bytes, wr_bytes : Out
        Pulses of a granted read's / write's byte count (0 otherwise), for the counters.
    error : Out
        A response other than OKAY came in this cycle.
    """

    def __init__(self, params: RtlParams) -> None:
        axi_limits(params.cfg)
        self._p = params
        port: DramPort = dram_port(params)
        super().__init__({
            "dram": In(port),
            **m_axi_members(params),
            "base": In(axi_addr_bits(params)),
            "rd_bytes": Out(params.burst_bytes_bits),
            "wr_bytes": Out(params.burst_bytes_bits),
            "error": Out(1),
        })

    def elaborate(self, platform: object) -> Module:
        m = Module()
        p = self._p
        cfg = p.cfg
        bpc = cfg.dram.bytes_per_cycle
        shift = (bpc - 1).bit_length()            # log2(bpc)
        n_max = cfg.dram.max_outstanding
        beat_bits = p.beat_bits
        bytes_bits = p.burst_bytes_bits
        abits = axi_addr_bits(p)
        beats_bits = 9                              # up to 256 beats (8 bits of len + 1)
        obits = max(1, shift)
        req = self.dram.req
        req_layout = req.payload.shape()

        # Every signal into the accelerator (``req.ready``, ``rsp_valid``, ``rsp_data``,
        # ``wr_ack``) comes straight from a register, and every one out of it ends in one (the
        # grant FIFOs, the write-data FIFO, the counters' pulses): the accelerator's own paths
        # from its channel port are as long as the bare design's, and the bridge's logic adds
        # none to them (docs/notes/axi-timing.md).

        # --- Grants: one entry for the address phase, one for the data phase.
        # One more entry than transactions in flight: a buffered FIFO that is full but for one
        # entry takes no write in the cycle its head moves to the output register.
        m.submodules.addr_q = addr_q = fifo.SyncFIFOBuffered(width=req_layout.size,
                                                             depth=n_max + 1)
        m.submodules.data_q = data_q = fifo.SyncFIFOBuffered(width=req_layout.size,
                                                             depth=n_max + 1)
        grant = Signal()
        # ``ready`` registered: at most ``n_max`` entries in either queue next cycle, counted
        # from this cycle's levels and grant without this cycle's pops (a pop reopens it a
        # cycle later). The arbiter keeps at most ``n_max`` transactions in flight and a queued
        # entry is one of them, so this bound never holds a grant back (the levels reach
        # ``n_max`` only when the arbiter is full), and ``ready``'s input stays a few LUTs.
        ready = Signal(init=1)
        m.d.comb += [
            req.ready.eq(ready),
            grant.eq(req.valid & ready),
            addr_q.w_en.eq(grant), addr_q.w_data.eq(req.payload),
            data_q.w_en.eq(grant), data_q.w_data.eq(req.payload),
        ]
        m.d.sync += [ready.eq(Mux(grant,
                                  (addr_q.level < n_max - 1) & (data_q.level < n_max - 1),
                                  (addr_q.level < n_max) & (data_q.level < n_max))),
                     self.rd_bytes.eq(Mux(grant & ~req.payload.write, req.payload.bytes, 0)),
                     self.wr_bytes.eq(Mux(grant & req.payload.write, req.payload.bytes, 0))]

        def countdown(name: str, load: object, value: object, dec: object
                      ) -> tuple[Signal, Signal]:
            """A down-counter loaded with ``value`` or decremented, with flags of its next
            value registered beside it, ``== 1`` and ``!= 0``, which it returns: logic that
            tests them reads a register, not a compare."""
            v = Signal(beats_bits, name=name)
            one = Signal(name=f"{name}_one")
            nz = Signal(name=f"{name}_nz")
            with m.If(load):
                m.d.sync += [v.eq(value), one.eq(value == 1), nz.eq(value != 0)]
            with m.Elif(dec):
                m.d.sync += [v.eq(v - 1), one.eq(v == 2), nz.eq(v != 1)]
            return one, nz

        lo_bits = (AXI_BOUNDARY - 1).bit_length()

        def geometry(entry: object, name: str) -> tuple[Signal, ...]:
            """An entry's offset in its first beat, AXI beats, channel beats, last lane,
            aligned address, and its AXI beats less one beside the beats up to the first 4 KB
            boundary less one: the lengths as AXI writes them, one carry chain
            (``(o + bytes - 1) >> shift``) and no chain (the inverted beat index inside the
            page) from the entry."""
            o = Signal(obits, name=f"{name}_o")
            n_axi = Signal(beats_bits, name=f"{name}_n_axi")
            n_ch = Signal(beats_bits, name=f"{name}_n_ch")
            end_lane = Signal(obits, name=f"{name}_end_lane")
            aligned = Signal(abits, name=f"{name}_aligned")
            span = Signal(bytes_bits + shift + 1, name=f"{name}_span")
            last = Signal(beats_bits, name=f"{name}_last")
            room = Signal(lo_bits - shift, name=f"{name}_room")
            m.d.comb += [
                o.eq(entry.addr[:shift] if shift else 0),
                aligned.eq(Cat(Const(0, shift), entry.addr[shift:])),
                span.eq(o + entry.bytes + (bpc - 1)),
                n_axi.eq(span >> shift),
                n_ch.eq((entry.bytes + (bpc - 1)) >> shift),
                end_lane.eq((o + entry.bytes - 1)[:obits] if shift else 0),
                last.eq((o + entry.bytes - 1) >> shift),
                room.eq(~aligned[shift:lo_bits]),
            ]
            return o, n_axi, n_ch, end_lane, aligned, last, room

        # --- Address phase: the head entry's one or two bursts on AR or AW, from registers.
        # An entry leaves the queue into the output registers, its bursts' addresses and
        # lengths computed on the way (the geometry's carry chains end there, not at the
        # pins); a second burst, where the entry crosses a 4 KB boundary, waits beside them.
        head = Signal(req_layout)
        m.d.comb += head.eq(addr_q.r_data)
        *_, a_aligned, a_last, a_room = geometry(head, "a")
        a_cross = Signal(name="a_cross")         # two bursts: one carry chain and a compare
        m.d.comb += a_cross.eq(a_last > a_room)
        # ``base`` is 4 KB aligned: it adds to the bits above the boundary only, and the second
        # burst starts at the boundary above the first. Its high bits and their successor are
        # registered here (``DRAM_BASE`` is written before ``START``, many cycles ahead).
        base_hi = Signal(abits - lo_bits)
        base_hi1 = Signal(abits - lo_bits)
        m.d.sync += [base_hi.eq(self.base[lo_bits:]), base_hi1.eq(self.base[lo_bits:] + 1)]
        out_valid = Signal()
        out_write = Signal()
        out_addr = Signal(abits)
        out_len = Signal(8)
        pend = Signal()                            # a second burst waits
        pend_addr = Signal(abits)
        pend_last = Signal(beats_bits)             # the entry's beats less one, and those
        pend_room = Signal(lo_bits - shift)        # up to the boundary less one
        for ch in ("ar", "aw"):
            m.d.comb += [
                getattr(self, f"m_axi_{ch}id").eq(0),
                getattr(self, f"m_axi_{ch}addr").eq(out_addr),
                getattr(self, f"m_axi_{ch}len").eq(out_len),
                getattr(self, f"m_axi_{ch}size").eq(shift),
                getattr(self, f"m_axi_{ch}burst").eq(0b01),      # INCR
                getattr(self, f"m_axi_{ch}lock").eq(0),
                getattr(self, f"m_axi_{ch}cache").eq(_CACHE_NORMAL),
                getattr(self, f"m_axi_{ch}prot").eq(0),
                getattr(self, f"m_axi_{ch}qos").eq(0),
            ]
        m.d.comb += [self.m_axi_arvalid.eq(out_valid & ~out_write),
                     self.m_axi_awvalid.eq(out_valid & out_write)]
        sent = Signal()
        m.d.comb += sent.eq((self.m_axi_arvalid & self.m_axi_arready)
                            | (self.m_axi_awvalid & self.m_axi_awready))
        take_head = Signal()
        m.d.comb += [take_head.eq(addr_q.r_rdy & (~out_valid | (sent & ~pend))),
                     addr_q.r_en.eq(take_head)]
        a_hi = a_aligned[lo_bits:]
        with m.If(take_head):
            m.d.sync += [
                out_valid.eq(1), out_write.eq(head.write),
                out_addr.eq(Cat(a_aligned[:lo_bits], a_hi + base_hi)),
                out_len.eq(Mux(a_cross, a_room, a_last)),
                pend.eq(a_cross),
                pend_addr.eq(Cat(Const(0, lo_bits), a_hi + base_hi1)),
                pend_last.eq(a_last), pend_room.eq(a_room),
            ]
        with m.Elif(sent):
            with m.If(pend):
                # The second burst's length from registers: the beats after the boundary.
                m.d.sync += [out_addr.eq(pend_addr), out_len.eq(pend_last - pend_room - 1),
                             pend.eq(0)]
            with m.Else():
                m.d.sync += out_valid.eq(0)

        # --- Write responses: one per burst, the write's last burst acknowledges it.
        # Unbuffered: its level counts every burst whose response is due (two per transaction
        # at most), so it is never full when an AW goes out.
        m.submodules.b_q = b_q = fifo.SyncFIFO(width=1, depth=2 * n_max)
        m.d.comb += [
            b_q.w_en.eq(self.m_axi_awvalid & self.m_axi_awready),
            b_q.w_data.eq(~pend),             # the entry's last burst
            self.m_axi_bready.eq(b_q.r_rdy),
            b_q.r_en.eq(self.m_axi_bvalid & b_q.r_rdy),
        ]
        m.d.sync += self.dram.wr_ack.eq(self.m_axi_bvalid & b_q.r_rdy & b_q.r_data[0])

        # --- Data phase, in grant order: the front transaction's beats.
        # The counts of beats left carry registered flags (``countdown``), so the strobes,
        # the end of the front and the next cycle's take are a few LUTs from registers.
        front = Signal(req_layout)
        busy = Signal()                               # a front transaction is loaded
        f_o = Signal(obits)
        f_end = Signal(obits)
        prev = Signal(beat_bits)                      # the last AXI beat read / channel beat sent
        have_prev = Signal()
        first_beat = Signal()                         # no AXI beat moved yet
        entry = Signal(req_layout)
        m.d.comb += entry.eq(data_q.r_data)
        e_o, e_n_axi, e_n_ch, e_end, _aligned, e_last, e_room = geometry(entry, "d")

        load = Signal()                               # the next entry becomes the front
        moved = Signal()                              # an AXI beat moves
        strobe = Signal()                             # a channel beat moves
        # AXI beats still to move, channel beats still to move, and AXI beats left in the
        # first burst (``wlast``).
        ax_one, ax_nz = countdown("left_axi", load, e_n_axi, moved)
        ch_one, ch_nz = countdown("left_ch", load, e_n_ch, strobe)
        # Beats of the first burst after this one: loaded from the first burst's length as
        # AXI writes it (one carry chain and a compare from the entry, as on AR/AW), its
        # zero flag registered beside it; it stops at 0 (``tf_live``).
        e_cross = Signal(name="d_cross")
        m.d.comb += e_cross.eq(e_last > e_room)
        tf_v = Signal(beats_bits, name="to_first")
        tf_zero = Signal(name="to_first_zero")
        tf_live = Signal(name="to_first_live")
        with m.If(load):
            m.d.sync += [tf_v.eq(Mux(e_cross, e_room, e_last)),
                         tf_zero.eq(Mux(e_cross, e_room == 0, e_last == 0)), tf_live.eq(1)]
        with m.Elif(moved & tf_live):
            m.d.sync += [tf_v.eq(tf_v - 1), tf_zero.eq(tf_v == 1), tf_live.eq(tf_v != 0)]
        tf_one = Signal()
        m.d.comb += tf_one.eq(tf_zero & tf_live)

        # The write beats the accelerator sends, taken into a FIFO by a registered strobe
        # (``take``) while the front write has channel beats left to take and room is sure.
        w_depth = 4
        m.submodules.wr_q = wr_q = fifo.SyncFIFO(width=beat_bits, depth=w_depth)
        take = Signal()                               # the accelerator's write strobe
        wr_data = wr_q.r_data

        r_fire = Signal()
        w_fire = Signal()
        finishing = Signal()
        is_read = busy & ~front.write
        is_write = busy & front.write
        m.d.comb += [
            self.m_axi_rready.eq(is_read & ax_nz),
            r_fire.eq(self.m_axi_rvalid & self.m_axi_rready),
        ]
        # Reads.
        aligned_read = f_o == 0
        tail = Signal()                                # the last channel beat, from ``prev``
        m.d.comb += tail.eq(is_read & ~aligned_read & have_prev & ~ax_nz & ch_nz)
        joined = Signal(2 * beat_bits)
        m.d.comb += joined.eq(Cat(prev, self.m_axi_rdata) >> Cat(Const(0, 3), f_o))
        read_strobe = Signal()
        m.d.comb += read_strobe.eq(
            (r_fire & (aligned_read | have_prev)) | tail)
        # Writes: AXI beat k from channel beats k - 1 (``prev``) and k (``wr_data``).
        lanes = bpc
        strb_first = Signal(lanes)
        strb_last = Signal(lanes)
        ones = (1 << lanes) - 1
        m.d.comb += [
            strb_first.eq(Const(ones, lanes) << f_o),
            strb_last.eq(Const(ones, lanes) >> (Const(lanes - 1, obits + 1) - f_end).as_unsigned()),
        ]
        wjoined = Signal(2 * beat_bits)
        m.d.comb += wjoined.eq(Cat(prev, wr_data) << Cat(Const(0, 3), f_o))
        m.d.comb += [
            self.m_axi_wvalid.eq(is_write & ax_nz & (~ch_nz | wr_q.r_rdy)),
            self.m_axi_wdata.eq(wjoined[beat_bits:]),
            self.m_axi_wstrb.eq(Mux(first_beat, strb_first, ones) & Mux(ax_one, strb_last, ones)),
            self.m_axi_wlast.eq(tf_one | ax_one),
            w_fire.eq(self.m_axi_wvalid & self.m_axi_wready),
        ]
        write_strobe = Signal()                       # a taken channel beat goes out
        m.d.comb += [write_strobe.eq(w_fire & ch_nz), wr_q.r_en.eq(write_strobe)]
        m.d.comb += strobe.eq(read_strobe | write_strobe)
        # Reads reach the accelerator a cycle after the bridge has them; a write beat is taken
        # only in a cycle that has none of them, so one strobe serves both.
        m.d.sync += self.dram.rsp_data.eq(
            Mux(aligned_read, self.m_axi_rdata, joined[:beat_bits]) if shift
            else self.m_axi_rdata)
        m.d.comb += moved.eq(r_fire | w_fire)
        # Done when both counts reach 0 at the end of this cycle.
        m.d.comb += finishing.eq(busy & Mux(strobe, ch_one, ~ch_nz) & Mux(moved, ax_one, ~ax_nz))
        with m.If(moved):
            m.d.sync += first_beat.eq(0)
        with m.If(r_fire):
            m.d.sync += [prev.eq(self.m_axi_rdata), have_prev.eq(1)]
        with m.If(write_strobe):
            m.d.sync += prev.eq(wr_data)
        m.d.comb += [load.eq((~busy | finishing) & data_q.r_rdy), data_q.r_en.eq(load)]
        with m.If(load):
            m.d.sync += [front.eq(entry), busy.eq(1), f_o.eq(e_o), f_end.eq(e_end),
                         first_beat.eq(1), have_prev.eq(0)]
        with m.Elif(finishing):
            m.d.sync += busy.eq(0)

        # The take side, one cycle ahead: whether the next cycle takes a write beat. A front
        # write's channel beats are all taken before it finishes, so a load never meets a
        # take of the front before it.
        tt_one, tt_nz = countdown("to_take", load, Mux(entry.write, e_n_ch, 0), take)
        more = Signal()                               # beats left to take after this cycle
        room = Signal()                               # the FIFO has room after this cycle
        # A taken beat is registered before the FIFO: the accelerator's write data comes
        # from its output buffer's block RAM, whose clock-to-out and routing left no time
        # for the FIFO's write (10.7 ns at seed 6). ``room`` counts it (``pending``).
        pending = Signal()
        pending_data = Signal(beat_bits)
        m.d.sync += [pending.eq(take), pending_data.eq(self.dram.wr_data)]
        held = Signal(range(w_depth + 3))             # beats in or on their way to the FIFO
        m.d.comb += [
            wr_q.w_en.eq(pending), wr_q.w_data.eq(pending_data),
            more.eq(Mux(load, entry.write, tt_nz & ~(tt_one & take))),
            held.eq(wr_q.level + pending + take - write_strobe),
            room.eq(held < w_depth),
        ]
        take_next = Signal()
        m.d.comb += take_next.eq(more & room & ~read_strobe)
        m.d.sync += [take.eq(take_next), self.dram.rsp_valid.eq(read_strobe | take_next)]

        m.d.comb += self.error.eq(
            (r_fire & (self.m_axi_rresp != OKAY))
            | (self.m_axi_bvalid & self.m_axi_bready & (self.m_axi_bresp != OKAY)))
        return m


class AxiAccelerator(wiring.Component):
    """:class:`hw.top.Accelerator` with an AXI4 master, an AXI4-Lite slave and an interrupt
    (module docstring), its own clock and reset ports.

    Raises
    ------
    ValueError
        The RTL cannot build ``cfg``, or its DRAM channel does not fit AXI (:func:`axi_limits`).
    """

    def __init__(self, cfg: HwConfig) -> None:
        try:
            p = RtlParams.of(cfg)
            axi_limits(cfg)
        except (TypeError, ValueError):
            self._MustUse__silence = True
            raise
        self._cfg = cfg
        self._p = p
        super().__init__({
            "aclk": In(1),
            "aresetn": In(1),
            **m_axi_members(p),
            **s_axi_members(),
            "interrupt": Out(1),
        })

    @property
    def cfg(self) -> HwConfig:
        return self._cfg

    def elaborate(self, platform: object) -> Module:
        m = Module()
        m.domains.sync = ClockDomain("sync")
        m.d.comb += [ClockSignal("sync").eq(self.aclk), ResetSignal("sync").eq(~self.aresetn)]
        m.submodules.accel = acc = Accelerator(self._cfg, status=True)
        m.submodules.bridge = bridge = AxiDramBridge(self._p)
        m.submodules.regs = regs = AxiLiteRegs(self._p.dram_addr_bits, axi_addr_bits(self._p))
        wiring.connect(m, acc.dram, bridge.dram)
        inner = {"m_axi_": bridge, "s_axi_": regs}
        for name, member in self.signature.members.items():
            if name[:6] in inner:
                ours, theirs = getattr(self, name), getattr(inner[name[:6]], name)
                m.d.comb += ours.eq(theirs) if member.flow == Out else theirs.eq(ours)
        error = Signal()
        with m.If(regs.start):
            m.d.sync += error.eq(0)
        with m.Elif(bridge.error):
            m.d.sync += error.eq(1)
        m.d.comb += [
            acc.start.eq(regs.start),
            bridge.base.eq(regs.dram_base),
            acc.insn_addr.eq(regs.insn_addr),
            acc.insn_count.eq(regs.insn_count),
            regs.done.eq(acc.done),
            regs.dram_error.eq(error),
            self.interrupt.eq(regs.interrupt),
        ]
        # The counters (``regmap.COUNTERS`` order), cleared by a start.
        names = [n for n, _ in regmap.COUNTERS]
        counting = Signal()
        with m.If(regs.start):
            m.d.sync += counting.eq(1)
        with m.Elif(acc.done):
            m.d.sync += counting.eq(0)
        m.d.comb += regs.counters[names.index("CYCLES")].eq(acc.cycles)
        # Every other counter adds a registered increment (one cycle late: a run's final
        # counts are the same) into a 32-bit low half whose carry is registered into the high
        # half, so no carry chain is longer than 32 bits. The value read is ``low : high +
        # carry``, the sum of the increments so far in every cycle: ``LO`` reads the low half,
        # and the high half it latches for ``HI`` comes through that one 32-bit increment.
        adds = {"DRAM_RD_BYTES": bridge.rd_bytes, "DRAM_WR_BYTES": bridge.wr_bytes}
        for i, mod in enumerate(Accelerator.STATUS_MODULES):
            adds[f"{mod.upper()}_ACTIVE"] = acc.active[i] & counting
            adds[f"{mod.upper()}_STALL"] = acc.stalled[i] & counting
        for n, add in adds.items():
            inc = Signal.like(add, name=f"inc_{n.lower()}")
            lo = Signal(32, name=f"count_{n.lower()}_lo")
            carry = Signal(name=f"count_{n.lower()}_carry")
            hi = Signal(32, name=f"count_{n.lower()}_hi")
            with m.If(regs.start):
                m.d.sync += [inc.eq(0), lo.eq(0), carry.eq(0), hi.eq(0)]
            with m.Else():
                m.d.sync += [inc.eq(add), Cat(lo, carry).eq(lo + inc), hi.eq(hi + carry)]
            m.d.comb += regs.counters[names.index(n)].eq(Cat(lo, hi + carry))
        return m
