// The child side of `redist check`: loads libraries, asks them their version,
// asks the driver, and (with --gpu) runs one real operation, all through
// dlopen/dlsym so that redist never links CUDA. Runs in a child process: a
// library that crashes or hangs here takes only the child down, and the
// parent reports which operation it was on (each one is announced first).
//
// Arguments: [--quick] [--preload PATH]... then operations (see prober::run);
// --quick loads with RTLD_LAZY and asks the driver only its version
// (check_depth::quick); --preload loads the system's driver libraries first,
// so that an installed library needing libcuda.so.1 by name gets that one.
// The parent passes every library by its path: the driver's (libcuda,
// NVML) never from the prefix.
// Protocol: one line per event, tab-separated, flushed by the caller:
//   begin <i>                      operation i starts
//   ok <i> [fields...]             operation i succeeded
//   fail <i> <message>             operation i failed (dlerror() verbatim, a CUDA error, ...)
//   gpu <i> <index> <major> <minor> <name>
#include <dlfcn.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "features/check_data.hpp"
#include "features/check_versions.hpp"
#include "redist/check.hpp"

namespace redist {

namespace {

// Tabs and line breaks would break the protocol.
std::string field(std::string_view text) {
    std::string out(text);
    for (char& c : out)
        if (c == '\t' || c == '\n' || c == '\r') c = ' ';
    return out;
}

// "major.minor.patch" of an encoded version: `major_unit` 10000 for
// major*10000 + minor*100 + patch, 1000 for major*1000 + minor*100 + patch.
std::string dotted(long long v, long long major_unit) {
    return std::to_string(v / major_unit) + "." + std::to_string(v / 100 % (major_unit / 100)) + "." +
           std::to_string(v % 100);
}

class prober {
public:
    explicit prober(const std::function<void(std::string_view)>& emit) : emit_(emit) {}

    void say(std::initializer_list<std::string_view> parts) {
        std::string line;
        for (auto p : parts) line += (line.empty() ? "" : "\t") + field(p);
        emit_(line);
    }
    // One GPU of the driver operation, from NVML or from the driver API alike.
    void say_gpu(const std::string& i, std::size_t index, int major, int minor, const char* name) {
        say({"gpu", i, std::to_string(index), std::to_string(major), std::to_string(minor), name});
    }

    // isolated: another copy of a library we may have loaded already (a
    // shadowing candidate) goes into a fresh link-map namespace (dlmopen), so
    // that the two copies never mix and ours stays what the other checks see.
    void* open(const std::string& path, std::string& err, bool isolated = false) {
        if (auto it = handles_.find(path); it != handles_.end() && !isolated) return it->second;
        dlerror();
        // Quick: only the called function's library is mapped, and its
        // functions are bound on first call (see check_depth).
        void* h = isolated ? dlmopen(LM_ID_NEWLM, path.c_str(), (quick_ ? RTLD_LAZY : RTLD_NOW) | RTLD_LOCAL)
                           : dlopen(path.c_str(), quick_ ? RTLD_LAZY | RTLD_LOCAL : RTLD_NOW | RTLD_GLOBAL);
        if (!h) {
            const char* e = dlerror();
            err = e ? e : isolated ? "dlmopen failed" : "dlopen failed";
            return nullptr;
        }
        if (!isolated) handles_[path] = h;
        return h;
    }

    template <class F>
    F sym(void* h, const char* name) {
        return reinterpret_cast<F>(dlsym(h, name));
    }

    int run(const std::vector<std::string>& args);

private:
    void op_load(const std::string& i, const std::string& path);
    void op_probe(const std::string& i, const std::string& kind, const std::string& path, bool isolated = false);
    void op_driver(const std::string& i, const std::string& path, const std::string& nvml);
    bool gpus_from_nvml(const std::string& i, const std::string& nvml);
    void op_gpu_cudnn(const std::string& i, const std::string& cudnn, const std::string& cuda);
    void op_gpu_cudart(const std::string& i, const std::string& cudart);
    void op_gpu_cublas(const std::string& i, const std::string& cublas, const std::string& cuda);

    const std::function<void(std::string_view)>& emit_;
    std::map<std::string, void*> handles_;
    bool quick_ = false;  // --quick: RTLD_LAZY, and the driver without cuInit
};

void prober::op_load(const std::string& i, const std::string& path) {
    std::string err;
    if (open(path, err)) say({"ok", i});
    else say({"fail", i, err});
}

void prober::op_probe(const std::string& i, const std::string& kind, const std::string& path, bool isolated) {
    std::string err;
    void* h = open(path, err, isolated);
    if (!h) return say({"fail", i, err});
    const auto k = static_cast<check_data::probe_kind>(std::atoi(kind.c_str()));
    const char* symbol = nullptr;
    for (const auto& p : check_data::version_probes)
        if (p.kind == k) symbol = p.symbol.data();
    void* f = symbol ? dlsym(h, symbol) : nullptr;
    if (!f) return say({"fail", i, std::string("no symbol ") + (symbol ? symbol : "?")});
    long long raw = 0;
    std::string version;
    switch (k) {
        case check_data::probe_kind::cudnn_get_version: {
            raw = static_cast<long long>(reinterpret_cast<std::size_t (*)()>(f)());
            // cuDNN 9 encodes major*10000 + minor*100 + patch; cuDNN 8 and older major*1000 + minor*100 + patch.
            version = dotted(raw, raw >= 90000 ? 10000 : 1000);
            break;
        }
        case check_data::probe_kind::cuda_runtime_get_version: {
            int v = 0;
            const int rc = reinterpret_cast<int (*)(int*)>(f)(&v);
            if (rc != 0) return say({"fail", i, "cudaRuntimeGetVersion returned error " + std::to_string(rc)});
            raw = v;
            version = cuda_version_string(v);
            break;
        }
        case check_data::probe_kind::cublas_get_property: {
            int parts[3] = {0, 0, 0};
            auto get = reinterpret_cast<int (*)(int, int*)>(f);
            for (int p = 0; p < 3; ++p)
                if (get(p, &parts[p]) != 0) return say({"fail", i, "cublasGetProperty failed"});
            raw = parts[0] * 10000LL + parts[1] * 100LL + parts[2];
            version = std::to_string(parts[0]) + "." + std::to_string(parts[1]) + "." + std::to_string(parts[2]);
            break;
        }
        case check_data::probe_kind::nccl_get_version: {
            int v = 0;
            if (reinterpret_cast<int (*)(int*)>(f)(&v) != 0) return say({"fail", i, "ncclGetVersion failed"});
            raw = v;
            // 2.9 and later: major*10000 + minor*100 + patch; before: major*1000 + minor*100 + patch.
            version = dotted(v, v >= 20900 ? 10000 : 1000);
            break;
        }
    }
    say({"ok", i, version, std::to_string(raw)});
}

// ---- the driver API, by dlsym --------------------------------------------------

struct cuda_api {
    using fn_i = int (*)(int*);
    int (*init)(unsigned) = nullptr;
    fn_i driver_version = nullptr;
    fn_i device_count = nullptr;
    int (*device_get)(int*, int) = nullptr;
    int (*attribute)(int*, int, int) = nullptr;
    int (*name)(char*, int, int) = nullptr;
    int (*retain)(void**, int) = nullptr;
    int (*set_current)(void*) = nullptr;
    int (*mem_alloc)(unsigned long long*, std::size_t) = nullptr;
    int (*mem_free)(unsigned long long) = nullptr;
    int (*htod)(unsigned long long, const void*, std::size_t) = nullptr;
    int (*dtoh)(void*, unsigned long long, std::size_t) = nullptr;
    int (*error_string)(int, const char**) = nullptr;

    std::string describe(int rc) const {
        const char* s = nullptr;
        if (error_string) error_string(rc, &s);
        return std::string(s ? s : "CUDA error") + " (" + std::to_string(rc) + ")";
    }
};

bool load_cuda(prober& p, const std::string& path, cuda_api& api, std::string& err) {
    void* h = p.open(path, err);
    if (!h) return false;
    api.init = p.sym<decltype(api.init)>(h, "cuInit");
    api.driver_version = p.sym<cuda_api::fn_i>(h, "cuDriverGetVersion");
    api.device_count = p.sym<cuda_api::fn_i>(h, "cuDeviceGetCount");
    api.device_get = p.sym<decltype(api.device_get)>(h, "cuDeviceGet");
    api.attribute = p.sym<decltype(api.attribute)>(h, "cuDeviceGetAttribute");
    api.name = p.sym<decltype(api.name)>(h, "cuDeviceGetName");
    api.retain = p.sym<decltype(api.retain)>(h, "cuDevicePrimaryCtxRetain");
    api.set_current = p.sym<decltype(api.set_current)>(h, "cuCtxSetCurrent");
    api.mem_alloc = p.sym<decltype(api.mem_alloc)>(h, "cuMemAlloc_v2");
    api.mem_free = p.sym<decltype(api.mem_free)>(h, "cuMemFree_v2");
    api.htod = p.sym<decltype(api.htod)>(h, "cuMemcpyHtoD_v2");
    api.dtoh = p.sym<decltype(api.dtoh)>(h, "cuMemcpyDtoH_v2");
    api.error_string = p.sym<decltype(api.error_string)>(h, "cuGetErrorString");
    return true;
}

// ---- the GPUs through NVML, by dlsym --------------------------------------------
//
// Why NVML first: it lists the GPUs and their compute capabilities without
// creating a CUDA context. Measured on the H200 machine (bench/device/
// check16.sh): nvmlInit + the queries take about 20 ms, cuInit + the same
// queries 235 ms, which alone set the full check's time. NVML sees every
// GPU of the machine, so with CUDA_VISIBLE_DEVICES set (the user narrowed
// what CUDA sees) the GPUs are asked of CUDA instead.
struct nvml_api {
    int (*init)() = nullptr;
    int (*shutdown)() = nullptr;
    int (*count)(unsigned*) = nullptr;
    int (*handle)(unsigned, void**) = nullptr;
    int (*capability)(void*, int*, int*) = nullptr;
    int (*name)(void*, char*, unsigned) = nullptr;
};

// The GPUs as "gpu" lines; false when NVML is missing or cannot answer.
// `nvml`: the path the parent found (the system's, beside libcuda first), or
// empty: never looked up by name here, where the loader path starts with the prefix.
bool prober::gpus_from_nvml(const std::string& i, const std::string& nvml) {
    if (std::getenv("CUDA_VISIBLE_DEVICES") || nvml.empty()) return false;
    std::string err;
    void* h = open(nvml, err);
    if (!h) return false;
    nvml_api api;
    api.init = sym<decltype(api.init)>(h, "nvmlInit_v2");
    api.shutdown = sym<decltype(api.shutdown)>(h, "nvmlShutdown");
    api.count = sym<decltype(api.count)>(h, "nvmlDeviceGetCount_v2");
    api.handle = sym<decltype(api.handle)>(h, "nvmlDeviceGetHandleByIndex_v2");
    api.capability = sym<decltype(api.capability)>(h, "nvmlDeviceGetCudaComputeCapability");
    api.name = sym<decltype(api.name)>(h, "nvmlDeviceGetName");
    if (!api.init || !api.shutdown || !api.count || !api.handle || !api.capability) return false;
    if (api.init() != 0) return false;
    struct gpu {
        int major = 0, minor = 0;
        char name[256] = {};
    };
    unsigned n = 0;
    std::vector<gpu> gpus;
    bool answered = api.count(&n) == 0;
    for (unsigned d = 0; answered && d < n && d < 64; ++d) {
        void* dev = nullptr;
        gpu& g = gpus.emplace_back();
        answered = api.handle(d, &dev) == 0 && api.capability(dev, &g.major, &g.minor) == 0;
        if (answered && api.name) api.name(dev, g.name, sizeof g.name - 1);
    }
    api.shutdown();
    if (!answered) return false;  // half a list would hide a GPU: ask CUDA instead
    for (std::size_t d = 0; d < gpus.size(); ++d) say_gpu(i, d, gpus[d].major, gpus[d].minor, gpus[d].name);
    return true;
}

void prober::op_driver(const std::string& i, const std::string& path, const std::string& nvml) {
    cuda_api api;
    std::string err;
    if (!load_cuda(*this, path, api, err)) return say({"fail", i, err});
    if (!api.driver_version) return say({"fail", i, "no symbol cuDriverGetVersion"});
    int v = 0;
    if (const int rc = api.driver_version(&v); rc != 0)
        return say({"fail", i, "cuDriverGetVersion: " + api.describe(rc)});
    say({"driver", i, std::to_string(v)});
    if (gpus_from_nvml(i, nvml)) return say({"ok", i, ""});
    // Quick: cuInit takes a quarter of a second on an H200 and maps much of the driver.
    if (quick_) return say({"ok", i, ""});
    if (!api.init || !api.device_count || !api.device_get || !api.attribute) return say({"ok", i, "no device API"});
    if (const int rc = api.init(0); rc != 0) return say({"ok", i, "cuInit: " + api.describe(rc)});
    int n = 0;
    if (const int rc = api.device_count(&n); rc != 0) return say({"ok", i, "cuDeviceGetCount: " + api.describe(rc)});
    for (int d = 0; d < n && d < 64; ++d) {
        int dev = 0, major = 0, minor = 0;
        char name[256] = {};
        if (api.device_get(&dev, d) != 0) continue;
        api.attribute(&major, 75, dev);  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
        api.attribute(&minor, 76, dev);  // ..._MINOR
        if (api.name) api.name(name, sizeof name - 1, dev);
        say_gpu(i, static_cast<std::size_t>(d), major, minor, name);
    }
    say({"ok", i, ""});
}

// Makes device 0's primary context current (the one the runtime API and the
// libraries built on it use too). Returns an error message or "".
std::string cuda_context(const cuda_api& api) {
    if (!api.init || !api.device_get || !api.retain || !api.set_current || !api.mem_alloc || !api.mem_free ||
        !api.htod || !api.dtoh)
        return "libcuda lacks a driver API function";
    if (int rc = api.init(0); rc != 0) return "cuInit: " + api.describe(rc);
    int dev = 0;
    if (int rc = api.device_get(&dev, 0); rc != 0) return "cuDeviceGet: " + api.describe(rc);
    void* ctx = nullptr;
    if (int rc = api.retain(&ctx, dev); rc != 0) return "cuDevicePrimaryCtxRetain: " + api.describe(rc);
    if (int rc = api.set_current(ctx); rc != 0) return "cuCtxSetCurrent: " + api.describe(rc);
    return "";
}

// Device memory that frees itself.
struct device_buffer {
    const cuda_api& api;
    unsigned long long ptr = 0;
    device_buffer(const cuda_api& a, std::size_t bytes, std::string& err) : api(a) {
        if (int rc = api.mem_alloc(&ptr, bytes); rc != 0) err = "cuMemAlloc: " + api.describe(rc);
    }
    ~device_buffer() {
        if (ptr) api.mem_free(ptr);
    }
    // The driver API hands out device addresses as integers (CUdeviceptr); the
    // libraries take the same address as a pointer the host never dereferences.
    // NOLINTNEXTLINE(performance-no-int-to-ptr): the conversion is the API's, not an optimisation hazard here
    void* get() const { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(ptr)); }
};

// Deterministic inputs in [-0.5, 0.5).
std::vector<float> pattern(std::size_t n, unsigned seed) {
    std::vector<float> v(n);
    std::uint32_t s = seed;
    for (auto& x : v) {
        s = s * 1664525u + 1013904223u;
        x = static_cast<float>(s >> 8) / static_cast<float>(1u << 24) - 0.5f;
    }
    return v;
}

// A 2D convolution with stride 1 and an output the size of its input: N
// images of C channels HxW, K filters of RxS, padding P on each side.
struct conv_shape {
    int N, C, H, W, K, R, S, P;
};

// What cudnnConvolutionForward computes (cross-correlation; x NCHW, w KCRS,
// the result NKHW), on the CPU.
std::vector<float> conv_reference(const conv_shape& shape, const std::vector<float>& x, const std::vector<float>& w) {
    const auto [N, C, H, W, K, R, S, P] = shape;
    std::vector<float> ref(std::size_t(N) * K * H * W, 0.f);
    for (int n = 0; n < N; ++n)
        for (int k = 0; k < K; ++k)
            for (int oh = 0; oh < H; ++oh)
                for (int ow = 0; ow < W; ++ow) {
                    float s = 0;
                    for (int c = 0; c < C; ++c)
                        for (int r = 0; r < R; ++r)
                            for (int t = 0; t < S; ++t) {
                                const int ih = oh + r - P, iw = ow + t - P;
                                if (ih < 0 || iw < 0 || ih >= H || iw >= W) continue;
                                s += x[((std::size_t(n) * C + c) * H + ih) * W + iw] *
                                     w[((std::size_t(k) * C + c) * R + r) * S + t];
                            }
                    ref[((std::size_t(n) * K + k) * H + oh) * W + ow] = s;
                }
    return ref;
}

void prober::op_gpu_cudnn(const std::string& i, const std::string& cudnn_path, const std::string& cuda_path) {
    cuda_api api;
    std::string err;
    if (!load_cuda(*this, cuda_path, api, err)) return say({"fail", i, err});
    if (err = cuda_context(api); !err.empty()) return say({"fail", i, err});
    void* h = open(cudnn_path, err);
    if (!h) return say({"fail", i, err});
    using desc = void*;
    auto create = sym<int (*)(desc*)>(h, "cudnnCreate");
    auto destroy = sym<int (*)(desc)>(h, "cudnnDestroy");
    auto create_tensor = sym<int (*)(desc*)>(h, "cudnnCreateTensorDescriptor");
    auto set_tensor = sym<int (*)(desc, int, int, int, int, int, int)>(h, "cudnnSetTensor4dDescriptor");
    auto create_filter = sym<int (*)(desc*)>(h, "cudnnCreateFilterDescriptor");
    auto set_filter = sym<int (*)(desc, int, int, int, int, int, int)>(h, "cudnnSetFilter4dDescriptor");
    auto create_conv = sym<int (*)(desc*)>(h, "cudnnCreateConvolutionDescriptor");
    auto set_conv = sym<int (*)(desc, int, int, int, int, int, int, int, int)>(h, "cudnnSetConvolution2dDescriptor");
    auto workspace = sym<int (*)(desc, desc, desc, desc, desc, int, std::size_t*)>(
        h, "cudnnGetConvolutionForwardWorkspaceSize");
    auto forward = sym<int (*)(desc, const void*, desc, const void*, desc, const void*, desc, int, void*, std::size_t,
                               const void*, desc, void*)>(h, "cudnnConvolutionForward");
    auto error_string = sym<const char* (*)(int)>(h, "cudnnGetErrorString");
    if (!create || !destroy || !create_tensor || !set_tensor || !create_filter || !set_filter || !create_conv ||
        !set_conv || !workspace || !forward)
        return say({"fail", i, "libcudnn lacks a legacy convolution function"});
    auto check = [&](int rc, const char* what) {
        if (rc == 0) return true;
        say({"fail", i,
             std::string(what) + ": " + (error_string ? error_string(rc) : "error") + " (" + std::to_string(rc) + ")"});
        return false;
    };
    // One 3x3 convolution, padding 1: N=2, C=8, 16x16 -> K=16 (the mnistCUDNN idea, smaller).
    constexpr conv_shape shape{2, 8, 16, 16, 16, 3, 3, 1};
    const auto [N, C, H, W, K, R, S, P] = shape;
    const auto x = pattern(std::size_t(N) * C * H * W, 1), w = pattern(std::size_t(K) * C * R * S, 2);
    const auto ref = conv_reference(shape, x, w);
    std::vector<float> y(ref.size());
    desc handle = nullptr, xd = nullptr, yd = nullptr, wd = nullptr, cd = nullptr;
    if (!check(create(&handle), "cudnnCreate")) return;
    struct guard {
        int (*destroy)(desc);
        desc h;
        ~guard() { destroy(h); }
    } g{destroy, handle};
    if (!check(create_tensor(&xd), "cudnnCreateTensorDescriptor") ||
        !check(create_tensor(&yd), "cudnnCreateTensorDescriptor") ||
        !check(create_filter(&wd), "cudnnCreateFilterDescriptor") ||
        !check(create_conv(&cd), "cudnnCreateConvolutionDescriptor"))
        return;
    constexpr int nchw = 0, f32 = 0, cross_correlation = 1, implicit_gemm = 0;
    if (!check(set_tensor(xd, nchw, f32, N, C, H, W), "cudnnSetTensor4dDescriptor") ||
        !check(set_tensor(yd, nchw, f32, N, K, H, W), "cudnnSetTensor4dDescriptor") ||
        !check(set_filter(wd, f32, nchw, K, C, R, S), "cudnnSetFilter4dDescriptor") ||
        !check(set_conv(cd, P, P, 1, 1, 1, 1, cross_correlation, f32), "cudnnSetConvolution2dDescriptor"))
        return;
    std::size_t ws_size = 0;
    if (!check(workspace(handle, xd, wd, cd, yd, implicit_gemm, &ws_size), "cudnnGetConvolutionForwardWorkspaceSize"))
        return;
    device_buffer dx(api, x.size() * 4, err), dw(api, w.size() * 4, err), dy(api, y.size() * 4, err),
        dws(api, ws_size ? ws_size : 4, err);
    if (!err.empty()) return say({"fail", i, err});
    if (int rc = api.htod(dx.ptr, x.data(), x.size() * 4); rc != 0)
        return say({"fail", i, "cuMemcpyHtoD: " + api.describe(rc)});
    if (int rc = api.htod(dw.ptr, w.data(), w.size() * 4); rc != 0)
        return say({"fail", i, "cuMemcpyHtoD: " + api.describe(rc)});
    const float one = 1, zero = 0;
    if (!check(forward(handle, &one, xd, dx.get(), wd, dw.get(), cd, implicit_gemm, dws.get(), ws_size, &zero, yd,
                       dy.get()),
               "cudnnConvolutionForward"))
        return;
    if (int rc = api.dtoh(y.data(), dy.ptr, y.size() * 4); rc != 0)
        return say({"fail", i, "cuMemcpyDtoH: " + api.describe(rc)});
    double max_err = 0;
    for (std::size_t j = 0; j < y.size(); ++j) max_err = std::fmax(max_err, std::fabs(double(y[j]) - ref[j]));
    char msg[200];
    std::snprintf(msg, sizeof msg,
                  "cudnnConvolutionForward %dx%dx%dx%d * %dx%dx%dx%d: max abs error %.3g vs the CPU reference", N, C, H,
                  W, K, C, R, S, max_err);
    if (max_err < 1e-3) say({"ok", i, std::string(msg) + ": Test passed!"});
    else say({"fail", i, std::string(msg) + ": WRONG"});
}

void prober::op_gpu_cudart(const std::string& i, const std::string& cudart_path) {
    std::string err;
    void* h = open(cudart_path, err);
    if (!h) return say({"fail", i, err});
    auto malloc_ = sym<int (*)(void**, std::size_t)>(h, "cudaMalloc");
    auto free_ = sym<int (*)(void*)>(h, "cudaFree");
    auto memcpy_ = sym<int (*)(void*, const void*, std::size_t, int)>(h, "cudaMemcpy");
    auto error_string = sym<const char* (*)(int)>(h, "cudaGetErrorString");
    if (!malloc_ || !free_ || !memcpy_) return say({"fail", i, "libcudart lacks cudaMalloc/cudaMemcpy/cudaFree"});
    auto describe = [&](int rc) {
        return std::string(error_string ? error_string(rc) : "error") + " (" + std::to_string(rc) + ")";
    };
    const auto in = pattern(1 << 20, 3);
    std::vector<float> out(in.size());
    void* d = nullptr;
    if (int rc = malloc_(&d, in.size() * 4); rc != 0) return say({"fail", i, "cudaMalloc: " + describe(rc)});
    int rc = memcpy_(d, in.data(), in.size() * 4, 1 /* cudaMemcpyHostToDevice */);
    if (rc == 0) rc = memcpy_(out.data(), d, out.size() * 4, 2 /* cudaMemcpyDeviceToHost */);
    free_(d);
    if (rc != 0) return say({"fail", i, "cudaMemcpy: " + describe(rc)});
    if (std::memcmp(in.data(), out.data(), in.size() * 4) != 0)
        return say({"fail", i, "cudaMemcpy round trip: 4 MiB came back different"});
    say({"ok", i, "cudaMemcpy round trip of 4 MiB: identical"});
}

void prober::op_gpu_cublas(const std::string& i, const std::string& cublas_path, const std::string& cuda_path) {
    cuda_api api;
    std::string err;
    if (!load_cuda(*this, cuda_path, api, err)) return say({"fail", i, err});
    if (err = cuda_context(api); !err.empty()) return say({"fail", i, err});
    void* h = open(cublas_path, err);
    if (!h) return say({"fail", i, err});
    auto create = sym<int (*)(void**)>(h, "cublasCreate_v2");
    auto destroy = sym<int (*)(void*)>(h, "cublasDestroy_v2");
    auto sgemm = sym<int (*)(void*, int, int, int, int, int, const float*, const float*, int, const float*, int,
                             const float*, float*, int)>(h, "cublasSgemm_v2");
    if (!create || !destroy || !sgemm) return say({"fail", i, "libcublas lacks cublasCreate_v2/cublasSgemm_v2"});
    const int n = 64;
    const std::size_t elements = std::size_t(n) * n;
    const auto a = pattern(elements, 4), b = pattern(elements, 5);
    std::vector<float> c(elements), ref(elements, 0.f);
    for (int col = 0; col < n; ++col)  // column-major, as BLAS
        for (int row = 0; row < n; ++row) {
            float s = 0;
            for (int k = 0; k < n; ++k) s += a[k * n + row] * b[col * n + k];
            ref[col * n + row] = s;
        }
    device_buffer da(api, a.size() * 4, err), db(api, b.size() * 4, err), dc(api, c.size() * 4, err);
    if (!err.empty()) return say({"fail", i, err});
    if (api.htod(da.ptr, a.data(), a.size() * 4) != 0 || api.htod(db.ptr, b.data(), b.size() * 4) != 0)
        return say({"fail", i, "cuMemcpyHtoD failed"});
    void* handle = nullptr;
    if (int rc = create(&handle); rc != 0) return say({"fail", i, "cublasCreate: status " + std::to_string(rc)});
    const float one = 1, zero = 0;
    const int rc = sgemm(handle, 0, 0, n, n, n, &one, static_cast<const float*>(da.get()), n,
                         static_cast<const float*>(db.get()), n, &zero, static_cast<float*>(dc.get()), n);
    destroy(handle);
    if (rc != 0) return say({"fail", i, "cublasSgemm: status " + std::to_string(rc)});
    if (api.dtoh(c.data(), dc.ptr, c.size() * 4) != 0) return say({"fail", i, "cuMemcpyDtoH failed"});
    double max_err = 0;
    for (std::size_t j = 0; j < c.size(); ++j) max_err = std::fmax(max_err, std::fabs(double(c[j]) - ref[j]));
    char msg[160];
    std::snprintf(msg, sizeof msg, "cublasSgemm %dx%dx%d: max abs error %.3g vs the CPU reference", n, n, n, max_err);
    if (max_err < 1e-3) say({"ok", i, msg});
    else say({"fail", i, std::string(msg) + ": WRONG"});
}

int prober::run(const std::vector<std::string>& args) {
    // Operations with their argument counts; an unknown or truncated one is a usage error.
    const std::map<std::string, std::size_t> arity = {{"load", 1},      {"probe", 2},     {"probe-isolated", 2},
                                                      {"driver", 2},    {"gpu-cudnn", 2}, {"gpu-cudart", 1},
                                                      {"gpu-cublas", 2}};
    std::size_t pos = 0;
    if (pos < args.size() && args[pos] == "--quick") {
        quick_ = true;
        ++pos;
    }
    for (std::string err; pos + 1 < args.size() && args[pos] == "--preload"; pos += 2)
        open(args[pos + 1], err);  // the system's driver library; a failure shows in the operations
    for (int index = 0; pos < args.size(); ++index) {
        const auto it = arity.find(args[pos]);
        if (it == arity.end() || args.size() - pos - 1 < it->second) return 2;
        const std::string i = std::to_string(index);
        const std::string& op = args[pos];
        const std::string& a1 = args[pos + 1];
        const std::string a2 = it->second > 1 ? args[pos + 2] : std::string();
        say({"begin", i});
        if (op == "load") op_load(i, a1);
        else if (op == "probe") op_probe(i, a1, a2);
        else if (op == "probe-isolated") op_probe(i, a1, a2, true);
        else if (op == "driver") op_driver(i, a1, a2);
        else if (op == "gpu-cudnn") op_gpu_cudnn(i, a1, a2);
        else if (op == "gpu-cudart") op_gpu_cudart(i, a1);
        else op_gpu_cublas(i, a1, a2);
        pos += 1 + it->second;
    }
    return 0;
}

}  // namespace

// Here rather than in check.cpp so that the small probe executable
// (tools/check_probe.cpp) needs this file alone.
std::string cuda_version_string(int encoded) {
    return std::to_string(encoded / 1000) + "." + std::to_string(encoded % 1000 / 10);
}

int run_check_probe(const std::vector<std::string>& args, const std::function<void(std::string_view)>& emit) {
    prober p(emit);
    return p.run(args);
}

}  // namespace redist
