// harness.cpp runs the kernels on the CPU: the .cu sources compiled as
// C++20 through shim.h. It reads a script on stdin, one command a line:
//
//   alloc ID BYTES            a buffer filled with 0xFF bytes (NaN floats)
//   load ID FILE              fill buffer ID from FILE (its exact size)
//   launch NAME GX GY GZ BX BY BZ NARGS ARG...
//   save ID FILE              write buffer ID to FILE
//   gemm TA TB M N K ALPHA BETA BATCH pA LDA SA pB LDB SB pC LDC SC
//                             cublasSgemmStridedBatched's column-major
//                             product, naively (ALPHA, BETA as float bits)
//   free ID                   drop buffer ID
//   write ID OFF N            the next N raw bytes on stdin go to buffer
//                             ID at byte OFF
//   read ID OFF N             write N bytes of buffer ID from OFF to stdout
//   sync                      write "ok" and a newline to stdout
//   conv PASS N C H W OC KH KW STRIDE PAD GROUPS pA pB pC
//                             a naive stand-in for cuDNN's convolution:
//                             PASS f writes C = conv(A, B) (x, w → y), d
//                             adds the input gradient of A (dy, w → dx),
//                             w adds the filter gradient (x, dy → dw)
//
// The commands after gemm make the harness an engine for the cuda
// package's Backend in tests: a Go process drives it over pipes. It is
// not a GPU and its stand-ins are not cuBLAS or cuDNN: they check the
// Backend's Go code (what it launches, with which arguments), not the
// libraries.
//
// An ARG is pID+OFF (a buffer address; p0+0 is null), iN (int), lN
// (long long), fHEX (float bits) or sHEX (a struct's bytes). Every
// launch checks each argument against the kernel's C parameter type
// (pointer, 4- or 8-byte integer, float, struct size), so a Go launch
// whose arguments disagree with the kernel's signature fails here as it
// would corrupt memory on a GPU.
#include <algorithm>
#include <array>
#include <atomic>
#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <sys/mman.h>
#include <ucontext.h>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "shim.h"

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
dim3 blockDim;
dim3 gridDim;

// The kernels, once per block slot (two blocks run at once): each copy
// has its own __shared__ arrays, in its own section. sources.inc (written
// by harness.go) includes this folder's .cu files and each declared
// module's.
#undef SP_SHARED_SECTION
#define SP_SHARED_SECTION "sp_shared0"
namespace slot0 {
#include "sources.inc"
}  // namespace slot0
#undef SP_SHARED_SECTION
#define SP_SHARED_SECTION "sp_shared1"
namespace slot1 {
#include "sources.inc"
}  // namespace slot1

// The sections' bounds, which the linker defines for sections named as C
// identifiers.
extern "C" char __start_sp_shared0[], __stop_sp_shared0[], __start_sp_shared1[], __stop_sp_shared1[];
constexpr int kSlots = 2;

namespace {

[[noreturn]] void fail(const std::string& msg) {
  std::cerr << "harness: " << msg << "\n";
  std::exit(2);
}

struct Arg {
  char kind;
  std::vector<unsigned char> bytes;  // the value as the kernel receives it
};

template <typename T>
std::string check_one(const Arg& a, int i) {
  using U = std::remove_cv_t<std::remove_reference_t<T>>;
  char want;
  if constexpr (std::is_pointer_v<U>) want = 'p';
  else if constexpr (std::is_floating_point_v<U>) want = sizeof(U) == 4 ? 'f' : 'd';
  else if constexpr (std::is_integral_v<U>) want = sizeof(U) == 4 ? 'i' : (sizeof(U) == 8 ? 'l' : '?');
  else want = 's';
  if (a.kind != want || a.bytes.size() != sizeof(U))
    return "argument " + std::to_string(i) + " is '" + a.kind + "' of " + std::to_string(a.bytes.size()) +
           " bytes, the kernel takes '" + want + "' of " + std::to_string(sizeof(U));
  return "";
}

template <typename... A, size_t... I>
std::string check_all(const std::vector<Arg>& args, std::index_sequence<I...>) {
  std::string err;
  ((err.empty() ? (void)(err = check_one<A>(args[I], I)) : (void)0), ...);
  return err;
}

template <typename... A, size_t... I>
void invoke(void (*f)(A...), void** p, std::index_sequence<I...>) {
  f(*static_cast<std::remove_cv_t<std::remove_reference_t<A>>*>(p[I])...);
}

struct Kernel {
  std::function<std::string(const std::vector<Arg>&)> check;
  std::function<void(void**)> run;
};

template <typename... A>
Kernel entry(void (*f)(A...)) {
  return Kernel{
      [](const std::vector<Arg>& args) -> std::string {
        if (args.size() != sizeof...(A))
          return std::to_string(args.size()) + " arguments, the kernel takes " + std::to_string(sizeof...(A));
        return check_all<A...>(args, std::index_sequence_for<A...>{});
      },
      [f](void** p) { invoke(f, p, std::index_sequence_for<A...>{}); }};
}

// Every kernel of the .cu sources, by name: kernels.inc is the list of
// K(name) the Go side writes from the sources' SP_KERNEL declarations
// when it builds the harness (compileHarness), so that a new kernel needs
// no entry here.
#define K(name) {#name, {entry(&slot0::name), entry(&slot1::name)}},
const std::map<std::string, std::array<Kernel, kSlots>> kernels = {
#include "kernels.inc"
};

std::map<long, std::vector<unsigned char>> buffers;

}  // namespace

void* sp_device_ptr(long long p) {
  if (p == 0) return nullptr;
  auto it = buffers.find((long)((unsigned long long)p >> 32));
  size_t off = (size_t)(p & 0xffffffff);
  if (it == buffers.end() || off > it->second.size()) fail("table entry " + std::to_string(p) + " is no buffer");
  return it->second.data() + off;
}

namespace {

std::vector<unsigned char> hex_bytes(const std::string& h) {
  std::vector<unsigned char> out(h.size() / 2);
  for (size_t i = 0; i < out.size(); i++) out[i] = (unsigned char)std::stoul(h.substr(2 * i, 2), nullptr, 16);
  return out;
}

Arg parse_arg(const std::string& t) {
  Arg a{t[0], {}};
  std::string v = t.substr(1);
  auto put = [&](auto x) {
    a.bytes.resize(sizeof(x));
    std::memcpy(a.bytes.data(), &x, sizeof(x));
  };
  switch (a.kind) {
    case 'p': {
      size_t plus = v.find('+');
      long id = std::stol(v.substr(0, plus));
      long long off = std::stoll(v.substr(plus + 1));
      void* p = nullptr;
      if (id != 0) {
        auto it = buffers.find(id);
        if (it == buffers.end()) fail("no buffer " + std::to_string(id));
        if (off < 0 || (size_t)off > it->second.size()) fail("offset " + std::to_string(off) + " outside buffer " + std::to_string(id));
        p = it->second.data() + off;
      }
      put(p);
      break;
    }
    case 'i': put((int32_t)std::stol(v)); break;
    case 'l': put((int64_t)std::stoll(v)); break;
    case 'f': put((uint32_t)std::stoul(v, nullptr, 16)); break;
    case 's': a.bytes = hex_bytes(v); break;
    default: fail("bad argument " + t);
  }
  return a;
}

// A block runs on one OS thread (its slot's), its threads as fibers
// (ucontext) on stacks allocated once per slot. A thread runs until it
// reaches __syncthreads (sp_barrier) or returns; when every thread of the
// block has reached the barrier the next phase starts, in the opposite
// order, so that a value read from another thread's shared write without
// a barrier between them differs between two orders and a missing
// barrier shows against the CPU reference. Threads that return while
// others wait at a barrier are a divergent barrier, which hangs or
// corrupts a GPU block: the harness fails.
constexpr size_t kFiberStack = 256 << 10;

struct Fiber {
  ucontext_t ctx;
  char* stack;
  bool done;
};

struct Slot {
  std::vector<Fiber> fibers;
  ucontext_t sched;
  Fiber* cur = nullptr;
  const Kernel* kernel = nullptr;
  void** params = nullptr;
  Slot() : fibers(SP_MAX_BLOCK) {
    for (auto& f : fibers) {
      void* p = mmap(nullptr, kFiberStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) fail("cannot map a fiber stack");
      f.stack = static_cast<char*>(p);
    }
  }
  ~Slot() {
    for (auto& f : fibers) munmap(f.stack, kFiberStack);
  }
};

thread_local Slot* this_slot;

// Stack switches are announced to AddressSanitizer in the sanitizer build
// (SEGPIPE_HARNESS_SANITIZE), which otherwise takes a fiber's stack for a
// corrupted one.
#if defined(__SANITIZE_ADDRESS__)
extern "C" void __sanitizer_start_switch_fiber(void** fake_stack_save, const void* bottom, size_t size);
extern "C" void __sanitizer_finish_switch_fiber(void* fake_stack_save, const void** bottom_old, size_t* size_old);
thread_local const void* sched_bottom;
thread_local size_t sched_size;
thread_local void* sched_fake;
#endif

// to_fiber switches from the block's scheduler to f; to_scheduler from
// the running fiber (exiting: it is not resumed) back.
void to_fiber(Slot& s, Fiber& f) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_start_switch_fiber(&sched_fake, f.stack, kFiberStack);
#endif
  swapcontext(&s.sched, &f.ctx);
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(sched_fake, nullptr, nullptr);
#endif
}

void to_scheduler(Slot& s, bool exiting) {
#if defined(__SANITIZE_ADDRESS__)
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(exiting ? nullptr : &fake, sched_bottom, sched_size);
#else
  (void)exiting;
#endif
  swapcontext(&s.cur->ctx, &s.sched);
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

void fiber_main(unsigned hi, unsigned lo) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(nullptr, &sched_bottom, &sched_size);
#endif
  Slot* s = reinterpret_cast<Slot*>(((uintptr_t)hi << 32) | lo);
  s->kernel->run(s->params);
  s->cur->done = true;
  to_scheduler(*s, true);  // never resumed
}

// run_block runs one block of k on the calling thread.
void run_block(Slot& s, const Kernel& k, void** params, uint3 block_idx, dim3 block) {
  unsigned n = block.x * block.y * block.z;
  s.kernel = &k;
  s.params = params;
  blockIdx = block_idx;
  uintptr_t self = reinterpret_cast<uintptr_t>(&s);
  for (unsigned t = 0; t < n; t++) {
    Fiber& f = s.fibers[t];
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack;
    f.ctx.uc_stack.ss_size = kFiberStack;
    f.ctx.uc_link = nullptr;
    f.done = false;
    makecontext(&f.ctx, reinterpret_cast<void (*)()>(fiber_main), 2, (unsigned)(self >> 32), (unsigned)(self & 0xffffffffu));
  }
  for (bool forward = true;; forward = !forward) {
    unsigned waiting = 0, finished = 0;
    for (unsigned i = 0; i < n; i++) {
      unsigned t = forward ? i : n - 1 - i;
      Fiber& f = s.fibers[t];
      if (f.done) continue;
      threadIdx = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
      s.cur = &f;
      to_fiber(s, f);
      if (f.done) finished++;
      else waiting++;
    }
    if (waiting == 0) return;
    if (finished > 0)
      fail("block (" + std::to_string(block_idx.x) + "," + std::to_string(block_idx.y) + "," +
           std::to_string(block_idx.z) + "): " + std::to_string(finished) + " threads returned while " +
           std::to_string(waiting) + " wait at __syncthreads (a divergent barrier)");
  }
}

// Shared memory of a block slot: its section's bounds.
struct SharedSection {
  char *begin, *end;
};
const SharedSection shared_sections[kSlots] = {{__start_sp_shared0, __stop_sp_shared0},
                                               {__start_sp_shared1, __stop_sp_shared1}};

// Blocks runs a launch's blocks on kSlots OS threads at once: the calling
// one and kSlots-1 helpers started once.
struct Blocks {
  Slot slots[kSlots];
  std::barrier<> start{kSlots}, done{kSlots};
  std::function<void(int)> job;
  bool quit = false;
  std::vector<std::thread> helpers;
  Blocks() {
    for (int i = 1; i < kSlots; i++)
      helpers.emplace_back([this, i] {
        for (;;) {
          start.arrive_and_wait();
          if (quit) return;
          job(i);
          done.arrive_and_wait();
        }
      });
  }
  void run(std::function<void(int)> f) {
    job = std::move(f);
    start.arrive_and_wait();
    job(0);
    done.arrive_and_wait();
  }
  ~Blocks() {
    quit = true;
    start.arrive_and_wait();
    for (auto& th : helpers) th.join();
  }
};

// launch runs every block of a grid, two at a time (one per slot, each
// with its own shared memory), in an order shuffled by the run's seed, as
// a GPU promises nothing about the order or the concurrency of blocks.
// Each block's shared memory is NaN bytes when it starts. A kernel that
// depends on block order, on another block's shared memory, on shared
// memory it did not write, or that races between blocks on global memory,
// gives other results than the CPU reference here.
void launch(Blocks& b, const std::array<Kernel, kSlots>& k, dim3 grid, dim3 block, void** params, std::mt19937_64& rng) {
  gridDim = grid;
  blockDim = block;
  std::vector<uint32_t> order((size_t)grid.x * grid.y * grid.z);
  std::iota(order.begin(), order.end(), 0u);
  std::shuffle(order.begin(), order.end(), rng);
  std::atomic<size_t> next{0};
  b.run([&](int slot) {
    this_slot = &b.slots[slot];
    for (size_t i; (i = next.fetch_add(1)) < order.size();) {
      uint32_t id = order[i];
      std::memset(shared_sections[slot].begin, 0xFF, shared_sections[slot].end - shared_sections[slot].begin);
      run_block(b.slots[slot], k[slot], params, {id % grid.x, (id / grid.x) % grid.y, id / (grid.x * grid.y)}, block);
    }
  });
}

}  // namespace

void sp_barrier() { to_scheduler(*this_slot, false); }

namespace {

// conv is the naive stand-in for cuDNN's three convolution passes
// (cross-correlation, dilation 1, NCHW, filter OC×(C/groups)×KH×KW), with
// double sums. Forward overwrites (beta 0); the backward passes add.
void conv(const std::string& pass, int n, int c, int h, int w, int oc, int kh, int kw, int st, int pad, int groups,
          const float* A, const float* B, float* C, const std::string& where) {
  int oh = (h + 2 * pad - kh) / st + 1, ow = (w + 2 * pad - kw) / st + 1;
  int cg = c / groups, og = oc / groups;
  auto X = [&](int b, int ch, int y, int x) { return ((long long)(b * c + ch) * h + y) * w + x; };
  auto Y = [&](int b, int o, int y, int x) { return ((long long)(b * oc + o) * oh + y) * ow + x; };
  auto W = [&](int o, int ci, int y, int x) { return ((long long)(o * cg + ci) * kh + y) * kw + x; };
  if (pass == "f" || pass == "w") {
    // f: y[b,o,oy,ox] = Σ x·w; w: dw[o,ci,ky,kx] += Σ x·dy.
    std::vector<double> dw(pass == "w" ? (size_t)oc * cg * kh * kw : 0);
    for (int b = 0; b < n; b++)
      for (int o = 0; o < oc; o++)
        for (int oy = 0; oy < oh; oy++)
          for (int ox = 0; ox < ow; ox++) {
            double s = 0;
            double g = pass == "w" ? B[Y(b, o, oy, ox)] : 0;
            for (int ci = 0; ci < cg; ci++)
              for (int ky = 0; ky < kh; ky++)
                for (int kx = 0; kx < kw; kx++) {
                  int iy = oy * st - pad + ky, ix = ox * st - pad + kx;
                  if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                  double xv = A[X(b, (o / og) * cg + ci, iy, ix)];
                  if (pass == "f") s += xv * B[W(o, ci, ky, kx)];
                  else dw[W(o, ci, ky, kx)] += xv * g;
                }
            if (pass == "f") C[Y(b, o, oy, ox)] = (float)s;
          }
    if (pass == "w")
      for (size_t i = 0; i < dw.size(); i++) C[i] += (float)dw[i];
  } else if (pass == "d" || pass == "D") {
    // dx[b,ch,iy,ix] += Σ dy·w.
    std::vector<double> dx((size_t)n * c * h * w);
    for (int b = 0; b < n; b++)
      for (int o = 0; o < oc; o++)
        for (int oy = 0; oy < oh; oy++)
          for (int ox = 0; ox < ow; ox++) {
            double g = A[Y(b, o, oy, ox)];
            for (int ci = 0; ci < cg; ci++)
              for (int ky = 0; ky < kh; ky++)
                for (int kx = 0; kx < kw; kx++) {
                  int iy = oy * st - pad + ky, ix = ox * st - pad + kx;
                  if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                  dx[X(b, (o / og) * cg + ci, iy, ix)] += g * B[W(o, ci, ky, kx)];
                }
          }
    // d adds, D writes (cuDNN's beta 1 and beta 0).
    for (size_t i = 0; i < dx.size(); i++) C[i] = pass == "D" ? (float)dx[i] : C[i] + (float)dx[i];
  } else {
    fail(where + "conv pass " + pass);
  }
}

}  // namespace

int main() {
  std::ios::sync_with_stdio(false);
  Blocks blocks;
  // The block order's seed: SEGPIPE_HARNESS_SEED, else 1, so that every
  // run takes the same orders (set it to try others).
  uint64_t seed = 1;
  if (const char* e = std::getenv("SEGPIPE_HARNESS_SEED")) seed = std::strtoull(e, nullptr, 10);
  std::mt19937_64 rng(seed);
  std::string line;
  int lineno = 0;
  while (std::getline(std::cin, line)) {
    lineno++;
    std::istringstream in(line);
    std::string cmd;
    if (!(in >> cmd)) continue;
    auto where = "line " + std::to_string(lineno) + ": ";
    if (cmd == "alloc") {
      long id;
      size_t n;
      in >> id >> n;
      buffers[id].assign(n, 0xFF);
    } else if (cmd == "load" || cmd == "save") {
      long id;
      std::string file;
      in >> id >> file;
      auto it = buffers.find(id);
      if (it == buffers.end()) fail(where + "no buffer " + std::to_string(id));
      if (cmd == "load") {
        std::ifstream f(file, std::ios::binary);
        f.read(reinterpret_cast<char*>(it->second.data()), it->second.size());
        if (!f) fail(where + "short read from " + file);
      } else {
        std::ofstream f(file, std::ios::binary);
        f.write(reinterpret_cast<const char*>(it->second.data()), it->second.size());
        if (!f) fail(where + "cannot write " + file);
      }
    } else if (cmd == "launch") {
      std::string name;
      dim3 g, b;
      int nargs;
      in >> name >> g.x >> g.y >> g.z >> b.x >> b.y >> b.z >> nargs;
      auto it = kernels.find(name);
      if (it == kernels.end()) fail(where + "no kernel " + name);
      if (b.x * b.y * b.z > SP_MAX_BLOCK) fail(where + name + ": block larger than SP_MAX_BLOCK");
      std::vector<Arg> args;
      for (int i = 0; i < nargs; i++) {
        std::string t;
        in >> t;
        args.push_back(parse_arg(t));
      }
      if (auto err = it->second[0].check(args); !err.empty()) fail(where + name + ": " + err);
      std::vector<void*> params;
      for (auto& a : args) params.push_back(a.bytes.data());
      launch(blocks, it->second, g, b, params.data(), rng);
    } else if (cmd == "gemm") {
      int ta, tb, m, n, kk, batch, lda, ldb, ldc;
      std::string alpha, beta, pa, pb, pc;
      long long sa, sb, sc;
      in >> ta >> tb >> m >> n >> kk >> alpha >> beta >> batch >> pa >> lda >> sa >> pb >> ldb >> sb >> pc >> ldc >> sc;
      if (!in) fail(where + "bad gemm");
      float al, be;
      Arg fa = parse_arg("f" + alpha), fb = parse_arg("f" + beta);
      std::memcpy(&al, fa.bytes.data(), 4);
      std::memcpy(&be, fb.bytes.data(), 4);
      float *A, *B, *C;
      Arg xa = parse_arg(pa), xb = parse_arg(pb), xc = parse_arg(pc);
      std::memcpy(&A, xa.bytes.data(), 8);
      std::memcpy(&B, xb.bytes.data(), 8);
      std::memcpy(&C, xc.bytes.data(), 8);
      for (int bi = 0; bi < batch; bi++)
        for (int i = 0; i < m; i++)
          for (int j = 0; j < n; j++) {
            float acc = 0;
            for (int p = 0; p < kk; p++) {
              float av = ta ? A[bi * sa + p + (long long)i * lda] : A[bi * sa + i + (long long)p * lda];
              float bv = tb ? B[bi * sb + j + (long long)p * ldb] : B[bi * sb + p + (long long)j * ldb];
              acc += av * bv;
            }
            float& cv = C[bi * sc + i + (long long)j * ldc];
            cv = be == 0.f ? al * acc : al * acc + be * cv;
          }
    } else if (cmd == "free") {
      long id;
      in >> id;
      if (!buffers.erase(id)) fail(where + "free of no buffer " + std::to_string(id));
    } else if (cmd == "write" || cmd == "read") {
      long id;
      size_t off, n;
      in >> id >> off >> n;
      auto it = buffers.find(id);
      if (!in || it == buffers.end()) fail(where + "bad " + cmd + " of buffer " + std::to_string(id));
      if (off > it->second.size() || n > it->second.size() - off)
        fail(where + cmd + " of " + std::to_string(n) + " bytes at " + std::to_string(off) + " outside buffer " +
             std::to_string(id) + " of " + std::to_string(it->second.size()));
      if (cmd == "write") {
        if (!std::cin.read(reinterpret_cast<char*>(it->second.data() + off), n)) fail(where + "short write");
      } else {
        std::cout.write(reinterpret_cast<const char*>(it->second.data() + off), n);
        std::cout.flush();
      }
    } else if (cmd == "sync") {
      std::cout << "ok\n";
      std::cout.flush();
    } else if (cmd == "conv") {
      std::string pass, pa, pb, pc;
      int n, c, h, w, oc, kh, kw, st, pad, groups;
      in >> pass >> n >> c >> h >> w >> oc >> kh >> kw >> st >> pad >> groups >> pa >> pb >> pc;
      if (!in || st < 1 || groups < 1 || c % groups || oc % groups) fail(where + "bad conv");
      float *A, *B, *C;
      Arg xa = parse_arg(pa), xb = parse_arg(pb), xc = parse_arg(pc);
      std::memcpy(&A, xa.bytes.data(), 8);
      std::memcpy(&B, xb.bytes.data(), 8);
      std::memcpy(&C, xc.bytes.data(), 8);
      conv(pass, n, c, h, w, oc, kh, kw, st, pad, groups, A, B, C, where);
    } else {
      fail(where + "unknown command " + cmd);
    }
  }
  return 0;
}
