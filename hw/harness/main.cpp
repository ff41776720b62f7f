// Verilator harness of the accel RTL: runs one program image to FINISH.
//
// The DRAM model is hw/dram_model.py's, cycle for cycle (accel/machine/memory.py states the
// rules): a request accepted in cycle g gets ceil(bytes / bpc) beats on the in-order data bus,
// a read's from g + latency, a write's from g + 1, each no earlier than the cycle after the
// previous transaction's last beat; read beats carry bytes addr + j * bpc ...; write beats
// store wr_data's first bytes; a write's response (wr_ack) comes latency - 1 cycles after its
// last beat. A request while MAX_OUTSTANDING transactions are in flight (a read until its last
// beat, a write until its response) is a protocol error.
//
// Usage: accel_sim IMAGE LATENCY BYTES_PER_CYCLE MAX_OUTSTANDING INSN_ADDR INSN_COUNT
//                  MAX_CYCLES [VCD [VCD_FIRST VCD_LAST]]
// With VCD (a model built with --trace), waveforms of program cycles VCD_FIRST to VCD_LAST - 1
// (default: all) go to that file; the two reset cycles before cycle 0 only when VCD_FIRST is 0.
// The image file is read, modified by the program's stores and written back. One JSON line
// with the counters goes to stdout. Exit status 3: not finished within MAX_CYCLES; 4: a DRAM
// access outside the image; 2: bad arguments (LATENCY and BYTES_PER_CYCLE are at least 1) or
// files.
//
// accel_params.h (generated) defines REQ_ADDR_LSB/BITS, REQ_BYTES_LSB/BITS, REQ_WRITE_LSB, and
// ACCEL_COUNTERS, X(i) for each activity counter cnt<i> of the wrapper (hw/activity.py), whose
// values go to the JSON line as "counters".

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <type_traits>
#include <vector>

#include "Vaccel_sim.h"
#include "accel_params.h"
#include "verilated.h"
#if VM_TRACE
#include "verilated_vcd_c.h"
#endif

namespace {

// Beat data: integral ports up to 64 bits, VlWide above.
template <typename T>
typename std::enable_if<std::is_integral<T>::value>::type set_beat(T& port, const uint8_t* src,
                                                                   size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(src[i]) << (8 * i);
    port = static_cast<T>(v);
}

template <typename T>
typename std::enable_if<std::is_integral<T>::value>::type get_beat(const T& port, uint8_t* dst,
                                                                   size_t n) {
    uint64_t v = static_cast<uint64_t>(port);
    for (size_t i = 0; i < n; ++i) dst[i] = static_cast<uint8_t>(v >> (8 * i));
}

template <std::size_t N>
void set_beat(VlWide<N>& port, const uint8_t* src, size_t n) {
    for (std::size_t w = 0; w < N; ++w) port[w] = 0;
    for (size_t i = 0; i < n; ++i) port[i / 4] |= static_cast<uint32_t>(src[i]) << (8 * (i % 4));
}

template <std::size_t N>
void get_beat(const VlWide<N>& port, uint8_t* dst, size_t n) {
    for (size_t i = 0; i < n; ++i) dst[i] = static_cast<uint8_t>(port[i / 4] >> (8 * (i % 4)));
}

template <typename T>
uint64_t field(const T& payload, int lsb, int bits) {
    uint64_t v = static_cast<uint64_t>(payload) >> lsb;
    return bits >= 64 ? v : (v & ((uint64_t(1) << bits) - 1));
}

struct Txn {
    uint64_t addr = 0, bytes = 0, first = 0, end = 0, done = 0;
    bool write = false;
};

}  // namespace

int main(int argc, char** argv) {
    if (argc < 8) {
        std::fprintf(stderr,
                     "usage: %s IMAGE LATENCY BPC MAX_OUTSTANDING INSN_ADDR INSN_COUNT "
                     "MAX_CYCLES [VCD [VCD_FIRST VCD_LAST]]\n", argv[0]);
        return 2;
    }
    const char* image_path = argv[1];
    const uint64_t latency = std::strtoull(argv[2], nullptr, 10);
    const uint64_t bpc = std::strtoull(argv[3], nullptr, 10);
    const uint64_t max_outstanding = std::strtoull(argv[4], nullptr, 10);
    const uint64_t insn_addr = std::strtoull(argv[5], nullptr, 10);
    const uint64_t insn_count = std::strtoull(argv[6], nullptr, 10);
    const uint64_t max_cycles = std::strtoull(argv[7], nullptr, 10);
    const char* vcd_path = argc > 8 ? argv[8] : nullptr;
    const uint64_t vcd_first = argc > 10 ? std::strtoull(argv[9], nullptr, 10) : 0;
    const uint64_t vcd_last = argc > 10 ? std::strtoull(argv[10], nullptr, 10) : UINT64_MAX;
    if (latency < 1 || bpc < 1 || max_outstanding < 1) {
        std::fprintf(stderr, "LATENCY, BYTES_PER_CYCLE and MAX_OUTSTANDING must be at least 1\n");
        return 2;
    }

    std::vector<uint8_t> image;
    {
        FILE* f = std::fopen(image_path, "rb");
        if (!f) { std::perror(image_path); return 2; }
        std::fseek(f, 0, SEEK_END);
        long size = std::ftell(f);
        std::fseek(f, 0, SEEK_SET);
        image.resize(static_cast<size_t>(size));
        if (size && std::fread(image.data(), 1, image.size(), f) != image.size()) {
            std::perror(image_path);
            return 2;
        }
        std::fclose(f);
    }

    auto ctx = std::make_unique<VerilatedContext>();
    ctx->commandArgs(1, argv);
    auto top = std::make_unique<Vaccel_sim>(ctx.get());
#if VM_TRACE
    std::unique_ptr<VerilatedVcdC> vcd;
    if (vcd_path) {
        ctx->traceEverOn(true);
        vcd = std::make_unique<VerilatedVcdC>();
        top->trace(vcd.get(), 99);
        vcd->open(vcd_path);
    }
#else
    (void)vcd_path;
    (void)vcd_first;
    (void)vcd_last;
#endif
    // The wrapper registers every input: what is set before a rising edge is what the design
    // sees in the cycle after it. One cycle: the outputs (settled after the last edge) are
    // read, the DRAM model takes them and sets the next cycle's inputs, the clock falls (an
    // eval that only moves the inputs) and rises (the design's registers and all its logic).
    // A tick that enters program cycle c is dumped when VCD_FIRST <= c < VCD_LAST (the reset
    // ticks enter cycles "-2" and "-1"); the first dump writes every signal's value.
    uint64_t time_ps = 0;
    auto tick = [&](bool dump) {
        top->clk = 0;
        top->eval();
#if VM_TRACE
        if (vcd && dump) vcd->dump(time_ps);
#endif
        top->clk = 1;
        top->eval();
#if VM_TRACE
        if (vcd && dump) vcd->dump(time_ps + 5000);
#endif
        (void)dump;
        time_ps += 10000;
    };
    auto dumps = [&](uint64_t c) { return c >= vcd_first && c < vcd_last; };

    // Reset: rst is registered at the first edge and resets the design at the second; start
    // is registered at the second and seen at the third, which is the program's cycle 0.
    top->rst = 1;
    top->start = 0;
    top->req_ready = 1;
    top->rsp_valid = 0;
    top->wr_ack = 0;
    tick(vcd_first == 0);
    top->rst = 0;
    top->insn_addr = insn_addr;
    top->insn_count = static_cast<uint32_t>(insn_count);
    top->start = 1;
    tick(vcd_first == 0);
    top->start = 0;
    tick(dumps(0));

    std::deque<Txn> bus;              // granted transactions whose beats are still to come
    std::deque<uint64_t> acks;        // cycles of the write responses to come
    std::vector<uint64_t> in_flight;  // done cycles of the transactions in flight
    uint64_t bus_free = 0;            // the first cycle after the last granted beat
    uint64_t bytes_read = 0, bytes_written = 0, transactions = 0;
    uint64_t read_txns = 0, write_txns = 0, beats = 0;
    uint64_t cycle = 0;
    int status = 0;
    uint64_t cycles = 0;
    std::vector<uint8_t> beat(bpc);
    // The beat of the transaction in front in cycle c, if any (its address and byte count).
    auto beat_at = [&](uint64_t c, uint64_t& lo, uint64_t& n) {
        if (bus.empty()) return false;
        const Txn& t = bus.front();
        if (c < t.first || c >= t.end) return false;
        lo = t.addr + (c - t.first) * bpc;
        n = std::min<uint64_t>(bpc, t.addr + t.bytes - lo);
        return true;
    };
    while (true) {
        uint64_t lo = 0, n = 0;
        if (beat_at(cycle, lo, n) && bus.front().write) {
            get_beat(top->wr_data, beat.data(), bpc);
            std::memcpy(image.data() + lo, beat.data(), n);
        }
        if (!bus.empty() && cycle + 1 >= bus.front().end) bus.pop_front();
        while (!acks.empty() && acks.front() <= cycle) acks.pop_front();
        if (top->req_valid) {
            uint64_t addr = field(top->req_payload, REQ_ADDR_LSB, REQ_ADDR_BITS);
            uint64_t bytes = field(top->req_payload, REQ_BYTES_LSB, REQ_BYTES_BITS);
            bool write = field(top->req_payload, REQ_WRITE_LSB, 1) != 0;
            std::vector<uint64_t> still;
            for (uint64_t done : in_flight)
                if (done > cycle) still.push_back(done);
            in_flight.swap(still);
            if (in_flight.size() >= max_outstanding || bytes == 0
                    || addr + bytes > image.size()) {
                std::fprintf(stderr,
                             "cycle %llu: bad DRAM %s of %llu bytes at %llu (image %zu bytes, "
                             "%zu in flight)\n",
                             (unsigned long long)cycle, write ? "write" : "read",
                             (unsigned long long)bytes, (unsigned long long)addr, image.size(),
                             in_flight.size());
                status = 4;
                break;
            }
            Txn t;
            t.addr = addr;
            t.bytes = bytes;
            t.write = write;
            t.first = std::max(cycle + (write ? 1 : latency), bus_free);
            t.end = t.first + (bytes + bpc - 1) / bpc;
            t.done = write ? t.end + latency - 1 : t.end;
            bus_free = t.end;
            bus.push_back(t);
            in_flight.push_back(t.done);
            if (write) acks.push_back(t.done - 1);
            ++transactions;
            ++(write ? write_txns : read_txns);
            beats += t.end - t.first;
            (write ? bytes_written : bytes_read) += bytes;
        }
        if (top->done) {
            cycles = top->cycles;
            break;
        }
        if (cycle >= max_cycles) {
            std::fprintf(stderr, "the RTL did not finish within %llu cycles (deadlock?)\n",
                         (unsigned long long)max_cycles);
            status = 3;
            break;
        }
        // The next cycle's beat and response (a request of this cycle has neither in it).
        const bool next_beat = beat_at(cycle + 1, lo, n);
        top->rsp_valid = next_beat;
        if (next_beat && !bus.front().write) {
            std::memset(beat.data(), 0, bpc);
            std::memcpy(beat.data(), image.data() + lo, n);
            set_beat(top->rsp_data, beat.data(), bpc);
        }
        top->wr_ack = !acks.empty() && acks.front() == cycle + 1;
        tick(dumps(cycle + 1));
        ++cycle;
    }
#if VM_TRACE
    if (vcd) vcd->close();
#endif
    top->final();
    if (status) return status;
    {
        FILE* f = std::fopen(image_path, "wb");
        if (!f || std::fwrite(image.data(), 1, image.size(), f) != image.size()) {
            std::perror(image_path);
            return 2;
        }
        std::fclose(f);
    }
    std::printf(
        "{\"cycles\": %llu, \"dram_bytes_read\": %llu, \"dram_bytes_written\": %llu, "
        "\"dram_transactions\": %llu, \"dram_read_txns\": %llu, \"dram_write_txns\": %llu, "
        "\"dram_beats\": %llu, \"counters\": [",
        (unsigned long long)cycles, (unsigned long long)bytes_read,
        (unsigned long long)bytes_written, (unsigned long long)transactions,
        (unsigned long long)read_txns, (unsigned long long)write_txns,
        (unsigned long long)beats);
#define X(i) static_cast<unsigned long long>(top->cnt##i),
    const unsigned long long counters[] = {ACCEL_COUNTERS};
#undef X
    for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); ++i)
        std::printf("%s%llu", i ? ", " : "", counters[i]);
    std::printf("]}\n");
    return 0;
}
