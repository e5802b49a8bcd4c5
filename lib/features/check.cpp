// `redist check`, the checks: reads the receipts and the ELF files they
// list, resolves their dependencies (check_loader.hpp), looks for shadowing
// copies and mixed versions, plans the child processes (check_child.hpp)
// that load and probe the libraries, and judges what they and the driver
// (check_driver.cpp) said. The child's own side is check_probe.cpp.
#include "redist/check.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "features/check_child.hpp"
#include "features/check_data.hpp"
#include "features/check_loader.hpp"
#include "features/check_versions.hpp"
#include "features/elf.hpp"
#include "features/gpu_arch.hpp"
#include "redist/dependencies.hpp"
#include "redist/prefix.hpp"
#include "redist/printable.hpp"
#include "support/budget.hpp"
#include "support/posix_file.hpp"

namespace redist {

namespace fs = std::filesystem;

const char* to_string(check_severity s) noexcept {
    switch (s) {
        case check_severity::info: return "info";
        case check_severity::warning: return "warning";
        case check_severity::failure: return "failure";
    }
    return "info";
}

std::size_t check_report::count(check_severity s) const {
    return static_cast<std::size_t>(
        std::count_if(findings.begin(), findings.end(), [s](const check_finding& f) { return f.severity == s; }));
}

std::string escape_for_display(std::string_view text) { return printable(text, no_length_limit, backslashes::escape); }

std::string debian_package_hint(std::string_view soname) {
    for (const auto& h : check_data::package_hints)
        if (h.soname == soname) return std::string(h.package);
    return "";
}

using namespace checking;

namespace {

// ---- the checks ------------------------------------------------------------------

// One child process: its operations and what each one is about.
struct op_meta {
    std::string what;      // load, probe, shadow, driver, gpu
    std::size_t file = 0;  // files_ index; shadows_ index for "shadow"
};
struct child_job {
    std::vector<std::string> flags;      // before the operations: --quick, --preload PATH
    std::optional<std::string> ld_path;  // the child's LD_LIBRARY_PATH: the prefix's, then the user's, if unset
    std::vector<std::string> ops;
    std::vector<op_meta> meta;
    std::optional<child_process> child;
    void add(std::initializer_list<std::string> op, op_meta m) {
        ops.insert(ops.end(), op);
        meta.push_back(std::move(m));
    }
};

struct elf_file {
    std::size_t receipt = 0;  // index into receipts
    std::string rel;          // prefix-relative path
    fs::path abs;
    elf::elf_info info;
};

class checker {
public:
    checker(const check_options& o, std::vector<receipt> receipts) : o_(o), receipts_(std::move(receipts)) {}

    result<check_report> run();

private:
    void add(std::string check, check_severity s, std::string component, std::string path, std::string message) {
        report_.findings.push_back({std::move(check), s, std::move(component), std::move(path), std::move(message)});
    }
    void scan_files();
    std::vector<child_job> plan_children(bool full);
    bool can_reuse(const driver_info& asked, bool full) const;
    void plan_loaders(std::vector<child_job>& jobs, std::size_t loaders);
    void collect_children(std::vector<child_job>& jobs, driver_info& driver);
    void apply(const op_meta& m, const op_result& res, const std::string& failure, driver_info& driver);
    void apply_probe(const elf_file& f, const op_result& res, const std::string& failure);
    void compare_version(const receipt& r, const std::string& path, const std::string& version,
                         const std::string& claim, const std::string& failure_lead);
    void check_resolution();
    void check_symbol_versions(const elf_file& f, const std::string& dep, const std::string& found);
    const std::vector<std::string>* defined_versions(const std::string& path);
    std::map<std::string, std::size_t> libraries_by_name() const;
    std::vector<std::size_t> load_order() const;
    bool prefix_holds(const char* name) const;
    std::set<std::size_t> needing_prefix_driver(const std::vector<std::size_t>& order);
    void check_file_versions();
    void check_header_versions();
    void check_runtime_dependencies();
    void find_shadow_candidates();
    void check_shadows();
    void evaluate_driver(driver_info d);
    void check_gpu_code(const std::vector<driver_info::gpu>& gpus);

    const check_options& o_;
    std::vector<receipt> receipts_;
    check_report report_;
    std::vector<elf_file> files_;
    std::vector<fs::path> prefix_dirs_;
    std::optional<resolver> resolver_;
    struct shadow_candidate {
        std::size_t file = 0;  // the installed file it shadows
        std::string path;
        std::string where;  // "LD_LIBRARY_PATH" | "ld.so.cache"
        std::optional<std::string> version;
        const check_data::version_probe* probe = nullptr;  // ask the copy in the child
    };
    std::vector<shadow_candidate> shadows_;
    std::map<std::string, std::optional<std::vector<std::string>>> version_defs_;  // by resolved path
    system_driver driver_;
    std::set<std::size_t> not_loaded_;            // files the full check must not load (needing_prefix_driver)
    const driver_info* reused_driver_ = nullptr;  // o_.driver_asked, when can_reuse() said so
    int host_class_ = 0;
    unsigned host_machine_ = 0;
};

// The version probe of a library, by its file name; nullptr when it has none.
const check_data::version_probe* probe_for(const std::string& filename) {
    const auto stem = split_so_name(filename).first;
    for (const auto& p : check_data::version_probes)
        if (stem == p.library) return &p;
    return nullptr;
}

void checker::scan_files() {
    for (std::size_t r = 0; r < receipts_.size(); ++r) {
        for (const auto& f : receipts_[r].files) {
            if (f.kind != entry_kind::regular) continue;
            // Link-time stubs (lib/stubs/libcuda.so) must never be loaded.
            if (f.path.find("/stubs/") != std::string::npos || f.path.rfind("stubs/", 0) == 0) continue;
            fs::path abs = o_.prefix / f.path;
            if (elf::read_elf_ident(abs).elf_class == 0) continue;
            auto info = elf::read_elf_file(abs);
            if (!info.ok()) {
                add("resolve", check_severity::failure, receipts_[r].component, f.path,
                    f.path + ": " + info.error_value().message);
                continue;
            }
            if (!info->has_dynamic) continue;  // static executables, objects: nothing to resolve
            files_.push_back({r, f.path, std::move(abs), std::move(*info)});
        }
    }
    // The host's ELF class and machine, from our own executable.
    const auto self = elf::read_elf_ident("/proc/self/exe");
    host_class_ = self.elf_class;
    host_machine_ = self.machine;
    report_.elf_files = files_.size();
}

void checker::check_resolution() {
    std::size_t foreign = 0;
    for (const auto& f : files_) {
        if (f.info.elf_class != host_class_ || f.info.machine != host_machine_) {
            ++foreign;
            continue;
        }
        if (f.info.is_shared_library()) ++report_.libraries;
        const fs::path origin = f.abs.parent_path();
        for (const auto& dep : f.info.needed) {
            const auto found = resolver_->find(dep, f.info.elf_class, f.info.machine, origin, f.info.rpath,
                                               f.info.runpath);
            if (!found.empty()) {
                check_symbol_versions(f, dep, found);
                continue;
            }
            std::string msg = f.rel + " needs " + dep + ": not found";
            if (const auto hint = debian_package_hint(dep); !hint.empty()) msg += " (Debian/Ubuntu: " + hint + ")";
            add("resolve", check_severity::failure, receipts_[f.receipt].component, f.rel, std::move(msg));
        }
    }
    if (foreign)
        add("resolve", check_severity::info, "", "",
            std::to_string(foreign) +
                " ELF files are for another machine (cross install): not resolved or loaded here");
}

// The version names a resolved dependency defines, read once per file;
// nullptr when it cannot be read (then nothing is claimed about it).
const std::vector<std::string>* checker::defined_versions(const std::string& path) {
    auto it = version_defs_.find(path);
    if (it == version_defs_.end()) {
        std::optional<std::vector<std::string>> defs;
        std::error_code ec;
        // The loader follows the SONAME link (libstdc++.so.6 -> ...so.6.0.30);
        // the reader does not, so it gets the file itself.
        const auto real = fs::canonical(path, ec);
        if (!ec)
            if (auto info = elf::read_elf_file(real); info.ok()) defs = std::move(info->version_defs);
        it = version_defs_.emplace(path, std::move(defs)).first;
    }
    return it->second ? &*it->second : nullptr;
}

// ld.so refuses to load a file that needs a symbol version its dependency
// does not define ("version `GLIBCXX_3.4.30' not found"): the usual failure
// of a library built on a newer distribution than the one it runs on. The
// check is made before any symbol is bound, so it needs no load.
void checker::check_symbol_versions(const elf_file& f, const std::string& dep, const std::string& found) {
    for (const auto& need : f.info.version_needs) {
        if (need.file != dep || need.names.empty()) continue;
        const auto* defs = defined_versions(found);
        // A dependency without version definitions satisfies any need (ld.so only notes it).
        if (!defs || defs->empty()) return;
        std::string missing;
        for (const auto& name : need.names)
            if (std::find(defs->begin(), defs->end(), name) == defs->end())
                missing += (missing.empty() ? "" : ", ") + name;
        if (missing.empty()) return;
        std::string msg = f.rel;
        msg.append(" needs version ").append(missing).append(" of ").append(dep).append(", which ").append(found);
        msg += " does not define: it is older than the one the library was built against";
        if (const auto hint = debian_package_hint(dep); !hint.empty()) msg += " (Debian/Ubuntu: a newer " + hint + ")";
        add("resolve", check_severity::failure, receipts_[f.receipt].component, f.rel, std::move(msg));
    }
}

// The installed shared libraries of this machine, by file name and SONAME.
std::map<std::string, std::size_t> checker::libraries_by_name() const {
    std::map<std::string, std::size_t> by_name;
    for (std::size_t i = 0; i < files_.size(); ++i) {
        const auto& f = files_[i];
        if (!f.info.is_shared_library() || f.info.elf_class != host_class_ || f.info.machine != host_machine_) continue;
        by_name.emplace(f.abs.filename().string(), i);
        if (!f.info.soname.empty()) by_name.emplace(f.info.soname, i);
    }
    return by_name;
}

// Shared libraries in dependency order (dependencies first), by the prefix
// files their DT_NEEDED resolve to.
std::vector<std::size_t> checker::load_order() const {
    const auto by_name = libraries_by_name();
    std::vector<std::size_t> order;
    std::vector<int> state(files_.size(), 0);  // 0 new, 1 visiting, 2 done
    std::function<void(std::size_t)> visit = [&](std::size_t i) {
        if (state[i]) return;  // done, or a cycle: ld.so tolerates those too
        state[i] = 1;
        for (const auto& dep : files_[i].info.needed)
            if (auto it = by_name.find(dep); it != by_name.end()) visit(it->second);
        state[i] = 2;
        order.push_back(i);
    };
    std::set<std::size_t> libs;
    for (const auto& [name, i] : by_name) libs.insert(i);
    for (std::size_t i : libs) visit(i);
    return order;
}

void checker::check_file_versions() {
    for (const auto& f : files_) {
        const auto& r = receipts_[f.receipt];
        const auto [stem, version] = split_so_name(f.abs.filename().string());
        const auto file_v = version_parts(version);
        const auto comp_v = version_parts(r.component_version);
        // Only names that share the component's major are compared: some
        // components ship libraries numbered on their own scheme (CUPTI's
        // libcupti.so.2024.1.0 in cuda_cupti 12.4.127).
        if (file_v.size() < 2 || comp_v.empty() || file_v[0] != comp_v[0]) continue;
        if (!versions_agree(file_v, comp_v))
            add("version", check_severity::failure, r.component, f.rel,
                f.rel + " is version " + version + ", but " + r.component + " is " + r.component_version +
                    ": the component mixes versions");
    }
}

// The version a product's header states (cudnn_version.h, ...) against the
// receipt: read, never run, so the post-install check can tell a release
// whose files are labelled with another version than they hold.
void checker::check_header_versions() {
    std::set<std::pair<std::size_t, std::string_view>> seen;  // (receipt, header)
    for (const auto& f : files_) {
        const auto& r = receipts_[f.receipt];
        const auto stem = split_so_name(f.abs.filename().string()).first;
        for (const auto& h : check_data::version_headers) {
            if (stem != h.library || !seen.insert({f.receipt, h.header}).second) continue;
            const auto at = std::find_if(r.files.begin(), r.files.end(), [&](const installed_file& e) {
                return e.kind == entry_kind::regular && fs::path(e.path).filename() == h.header;
            });
            if (at == r.files.end()) continue;
            auto text = read_file(o_.prefix / at->path, 4u << 20, follow_links::no);
            if (!text.ok()) {
                add("version", check_severity::warning, r.component, at->path,
                    at->path + ": cannot be read: " + text.error_value().message);
                continue;
            }
            std::string version;
            if (h.minor.empty()) {
                if (const auto v = header_define(*text, h.major)) version = cuda_version_string(static_cast<int>(*v));
            } else if (const auto ma = header_define(*text, h.major), mi = header_define(*text, h.minor),
                       pa = header_define(*text, h.patch);
                       ma && mi && pa) {
                version = std::to_string(*ma) + "." + std::to_string(*mi) + "." + std::to_string(*pa);
            }
            if (version.empty()) continue;  // not the header we know: nothing to claim
            compare_version(r, at->path, version, at->path + " says " + version, "");
        }
    }
}

void checker::check_runtime_dependencies() {
    std::set<std::string> seen;
    for (const auto& f : files_) {
        const auto& r = receipts_[f.receipt];
        const auto [stem, version] = split_so_name(f.abs.filename().string());
        const auto major = cuda_major_of(r);
        for (const auto& d : check_data::runtime_dependencies) {
            if (stem != d.library || !major) continue;
            const std::string soname = replace_all(std::string(d.soname), "{cuda}", std::to_string(*major));
            if (!seen.insert(soname).second) continue;
            std::string via;
            const auto hit = resolver_->find(soname, f.info.elf_class, f.info.machine, f.abs.parent_path(),
                                             f.info.rpath, f.info.runpath, &via);
            if (hit.empty())
                add("runtime", check_severity::warning, r.component, f.rel,
                    soname + " (" + std::string(d.why) + "): not found; install it with: " +
                        replace_all(replace_all(std::string(d.remedy), "{cuda}", std::to_string(*major)), "{prefix}",
                                    shell_quote(o_.prefix.string())));
            else
                add("runtime", check_severity::info, r.component, f.rel,
                    soname + ": " + hit + " (through " + via + ")");
        }
    }
}

void checker::find_shadow_candidates() {
    std::set<std::string> seen;
    for (std::size_t i = 0; i < files_.size(); ++i) {
        const auto& f = files_[i];
        if (!f.info.is_shared_library() || f.info.soname.empty() || !seen.insert(f.info.soname).second) continue;
        if (f.info.elf_class != host_class_ || f.info.machine != host_machine_) continue;
        if (is_driver_library(f.abs.filename().string())) continue;
        std::error_code ec;
        const auto ours = fs::canonical(f.abs, ec);
        const auto prefix = fs::canonical(o_.prefix, ec).string() + "/";
        for (const auto& [path, where] : resolver_->all_copies(f.info.soname, f.info.elf_class, f.info.machine)) {
            std::error_code ec2;
            const auto theirs = fs::canonical(path, ec2);
            if (ec2 || theirs == ours || theirs.string().rfind(prefix, 0) == 0) continue;
            shadow_candidate c{i, path, where, std::nullopt, nullptr};
            // The version from the real file's name (libcudnn.so.9.10.2), else ask the copy itself.
            const auto [s2, v] = split_so_name(theirs.filename().string());
            if (version_parts(v).size() >= 2) c.version = v;
            else c.probe = probe_for(f.abs.filename().string());
            shadows_.push_back(std::move(c));
        }
    }
}

void checker::check_shadows() {
    for (const auto& c : shadows_) {
        const auto& f = files_[c.file];
        const auto& r = receipts_[f.receipt];
        const auto& v = c.version;
        if (v && versions_agree(version_parts(*v), version_parts(r.component_version))) continue;
        std::error_code ec, ec2;
        if (!v && fs::file_size(c.path, ec) == fs::file_size(f.abs, ec2)) continue;
        const bool env = c.where == "LD_LIBRARY_PATH";
        // Quick loads nothing, so a copy whose file name has no version may be the same one.
        const bool sure = v || report_.depth == check_depth::full;
        std::string msg = f.info.soname + ": another copy" + (v ? " (version " + *v + ")" : " (version unknown)") +
                          " at " + c.path + " through " + c.where + "; ";
        msg += env ? "LD_LIBRARY_PATH is searched before DT_RUNPATH, so programs load that copy instead of "
                   : "programs that do not put the prefix first (no RPATH/RUNPATH, no LD_LIBRARY_PATH) load it instead "
                     "of ";
        msg += r.component + " " + r.component_version;
        if (r.product == "cudnn")
            msg +=
                ", and mixing cuDNN sub-libraries of two versions fails with CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH";
        else msg += ", mixing two versions in one process";
        add("shadow", env && sure ? check_severity::failure : check_severity::warning, r.component, f.rel,
            std::move(msg));
    }
}

// `d`: the driver child's answer (or the one reused).
void checker::evaluate_driver(driver_info d) {
    d.kernel_module = kernel_module_version(o_.driver_version_file);
    d.libcuda = driver_.libcuda;
    if (d.libcuda.empty() && !d.kernel_module) {
        add("driver", check_severity::warning, "", "",
            "no NVIDIA driver found (libcuda.so.1 is not on the loader path, no /proc/driver/nvidia/version): "
            "nothing can run on a GPU here (fine on a build machine)");
        if (d.gpus.empty()) return;  // else the GPUs of check_options::compute_capabilities
    }
    if (d.cuda_version)
        add("driver", check_severity::info, "", "",
            "driver " + d.kernel_module.value_or("(kernel module version unknown)") + " supports CUDA " +
                cuda_version_string(*d.cuda_version) + " (" + d.libcuda + ")");
    if (!d.error.empty())
        add("driver", check_severity::warning, "", "",
            (d.cuda_version ? "the driver answered, but no GPU is usable: " : "cannot ask the driver: ") + d.error);
    std::set<std::string> said;
    for (const auto& r : receipts_) {
        const auto major = cuda_major_of(r);
        for (auto& f : preflight_findings(d, r.product, r.component_version, major)) {
            if (!said.insert(f.message).second) continue;
            f.component = r.component;
            report_.findings.push_back(std::move(f));
        }
    }
    // Quick: no cuInit, so no GPU list to judge (see check_depth).
    if (report_.depth == check_depth::full && d.gpus.empty() && d.cuda_version && d.error.empty())
        add("gpu", check_severity::warning, "", "", "the driver reports no GPU");
}

// The GPU code of every installed file of this machine against the GPUs
// judged (gpu_arch.hpp): read from the files, never run, so at both depths.
void checker::check_gpu_code(const std::vector<driver_info::gpu>& gpus) {
    if (gpus.empty()) return;
    std::vector<gpu_arch::installed_library> libs;
    for (const auto& f : files_) {
        if (f.info.elf_class != host_class_ || f.info.machine != host_machine_) continue;
        const auto& r = receipts_[f.receipt];
        libs.push_back({&r, cuda_major_of(r), f.rel, f.abs});
    }
    for (auto& f : gpu_arch::gpu_code_findings(libs, gpus, o_.prefix)) report_.findings.push_back(std::move(f));
}

// What the children do. Quick (the post-install check of fetch) runs no
// installed code: the driver's child alone, loading the system's libcuda.
// Full loads every library, probes versions, asks the driver, and with --gpu
// runs one operation per product. Several children run at once: RTLD_NOW
// relocation of cuDNN's 500 MB dominates the full check's time, and cuInit
// takes tens of milliseconds on a real GPU, so the libraries are spread over
// a few loaders (balanced by size, each in dependency order) and the driver
// gets its own child.
std::vector<child_job> checker::plan_children(bool full) {
    // The machine's budget (affinity and cgroup quota), as every other thread count.
    const std::size_t loaders = full ? std::clamp<std::size_t>(run_budget::machine_limits().threads / 2, 1, 4) : 0;
    std::vector<child_job> jobs(loaders + 2);  // loaders, then probes (+ GPU runs), then the driver
    child_job& probes = jobs[loaders];
    child_job& driver = jobs[loaders + 1];
    driver_ = find_system_driver(o_, host_class_, host_machine_);
    driver.ld_path = driver_.ld_path;
    if (!full) driver.flags = {"--quick"};
    if (!o_.load) return jobs;
    if (full) {
        plan_loaders(jobs, loaders);
        // Where the prefix holds a driver library, the loaders' path (the
        // prefix first) would find it for a library that needs it by name:
        // the system's is loaded first, and ld.so reuses it by SONAME.
        for (const auto& [soname, lib] :
             {std::pair{"libcuda.so.1", &driver_.libcuda}, std::pair{"libnvidia-ml.so.1", &driver_.nvml}})
            if (!lib->empty() && prefix_holds(soname))
                for (std::size_t j = 0; j <= loaders; ++j)
                    jobs[j].flags.insert(jobs[j].flags.end(), {"--preload", *lib});
    }
    for (std::size_t i = 0; full && i < files_.size(); ++i) {
        if (!files_[i].info.is_shared_library() || not_loaded_.count(i)) continue;
        if (const auto* p = probe_for(files_[i].abs.filename().string()))
            probes.add({"probe", std::to_string(static_cast<int>(p->kind)), files_[i].abs.string()}, {"probe", i});
    }
    for (std::size_t k = 0; full && k < shadows_.size(); ++k)
        if (shadows_[k].probe)
            probes.add({"probe-isolated", std::to_string(static_cast<int>(shadows_[k].probe->kind)), shadows_[k].path},
                       {"shadow", k});
    if (driver_.libcuda.empty()) return jobs;
    if (o_.driver_asked && can_reuse(*o_.driver_asked, full)) reused_driver_ = o_.driver_asked;
    else driver.add({"driver", driver_.libcuda, driver_.nvml}, {"driver", 0});
    if (!o_.gpu) return jobs;
    for (std::size_t i = 0; i < files_.size(); ++i) {
        const auto [stem, v] = split_so_name(files_[i].abs.filename().string());
        if (!files_[i].info.is_shared_library() || v.empty() || not_loaded_.count(i)) continue;
        const std::string& cuda = driver_.libcuda;
        if (stem == "libcudnn.so") probes.add({"gpu-cudnn", files_[i].abs.string(), cuda}, {"gpu", i});
        else if (stem == "libcudart.so") probes.add({"gpu-cudart", files_[i].abs.string()}, {"gpu", i});
        else if (stem == "libcublas.so") probes.add({"gpu-cublas", files_[i].abs.string(), cuda}, {"gpu", i});
    }
    return jobs;
}

// Whether the driver's answer asked before the install (driver_query) is
// what asking now would say: the same libcuda (both come from
// find_system_driver, never from the prefix, so the install cannot change
// which one). A full check needs an answer asked at full depth (cuInit when
// NVML cannot list the GPUs).
bool checker::can_reuse(const driver_info& asked, bool full) const {
    if (asked.libcuda.empty() || asked.libcuda != driver_.libcuda) return false;
    return !full || asked.depth == check_depth::full;
}

// Whether a lib directory of the prefix holds `name` (any kind of file).
bool checker::prefix_holds(const char* name) const {
    for (const auto& dir : prefix_dirs_)
        if (struct stat st{}; ::lstat((dir / name).c_str(), &st) == 0) return true;
    return false;
}

// The libraries that need (directly or through other installed libraries) a
// driver library the prefix holds and the system does not: loading them
// would load the prefix's driver. Each is reported, and not loaded.
std::set<std::size_t> checker::needing_prefix_driver(const std::vector<std::size_t>& order) {
    std::set<std::string> unavailable;  // driver SONAMEs only the prefix has
    for (const auto& [soname, lib] :
         {std::pair{"libcuda.so.1", &driver_.libcuda}, std::pair{"libnvidia-ml.so.1", &driver_.nvml}})
        if (lib->empty() && prefix_holds(soname)) unavailable.insert(soname);
    std::set<std::size_t> out;
    if (unavailable.empty()) return out;
    const auto by_name = libraries_by_name();
    for (std::size_t i : order) {  // dependencies first
        for (const auto& dep : files_[i].info.needed) {
            const auto it = by_name.find(dep);
            if (!unavailable.count(dep) && (it == by_name.end() || !out.count(it->second))) continue;
            out.insert(i);
            add("load", check_severity::warning, receipts_[files_[i].receipt].component, files_[i].rel,
                files_[i].rel + " is not loaded: it needs " + dep +
                    ", and the check never loads the driver's libraries from the prefix (the system has none)");
            break;
        }
    }
    return out;
}

// Every library into one of the first `loaders` jobs, balanced by size,
// each job in dependency order. The driver's libraries are not loaded.
void checker::plan_loaders(std::vector<child_job>& jobs, std::size_t loaders) {
    auto order = load_order();
    not_loaded_ = needing_prefix_driver(order);
    std::erase_if(order, [&](std::size_t i) {
        return not_loaded_.count(i) != 0 || is_driver_library(files_[i].abs.filename().string());
    });
    std::vector<std::size_t> by_size(order);
    std::error_code ec;
    std::map<std::size_t, std::uintmax_t> size;
    for (std::size_t i : order) size[i] = fs::file_size(files_[i].abs, ec);
    std::stable_sort(by_size.begin(), by_size.end(), [&](std::size_t a, std::size_t b) { return size[a] > size[b]; });
    std::map<std::size_t, std::size_t> group;  // file -> loader
    std::vector<std::uintmax_t> load(loaders, 0);
    for (std::size_t i : by_size) {
        const auto g = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
        group[i] = g;
        load[g] += size[i];
    }
    for (std::size_t i : order) jobs[group[i]].add({"load", files_[i].abs.string()}, {"load", i});
}

void checker::apply_probe(const elf_file& f, const op_result& res, const std::string& failure) {
    const auto& r = receipts_[f.receipt];
    const auto* p = probe_for(f.abs.filename().string());
    if (!res.ok) {
        add("version", check_severity::failure, r.component, f.rel,
            std::string(p->symbol) + "() in " + f.rel + " could not be called: " + failure);
        return;
    }
    if (res.fields.size() < 2) return;
    const std::string call = std::string(p->symbol) + "() = " + res.fields[1] + " (" + res.fields[0] + ")";
    compare_version(r, f.rel, res.fields[0], call, f.rel + ": ");
}

// A version the installed files state (`claim`: what states it) against the
// receipt's; `failure_lead` opens the failure's message.
void checker::compare_version(const receipt& r, const std::string& path, const std::string& version,
                              const std::string& claim, const std::string& failure_lead) {
    if (versions_agree(version_parts(version), version_parts(r.component_version)))
        add("version", check_severity::info, r.component, path,
            claim + ": matches " + r.component + " " + r.component_version);
    else
        add("version", check_severity::failure, r.component, path,
            failure_lead + claim + ", but the receipt says " + r.component + " " + r.component_version);
}

// One operation's outcome (`failure`: the child's message, or why it died).
void checker::apply(const op_meta& m, const op_result& res, const std::string& failure, driver_info& driver) {
    if (m.what == "shadow") {
        if (res.ok && !res.fields.empty()) shadows_[m.file].version = res.fields[0];
        return;
    }
    if (m.what == "driver") {
        driver.cuda_version = res.driver_version;
        driver.gpus = res.gpus;
        driver.error = failure;
        return;
    }
    const elf_file& f = files_[m.file];
    const std::string& component = receipts_[f.receipt].component;
    if (m.what == "load") {
        if (res.ok) ++report_.loaded;
        else add("load", check_severity::failure, component, f.rel, "dlopen(" + f.rel + "): " + failure);
    } else if (m.what == "probe") {
        apply_probe(f, res, failure);
    } else if (res.ok) {
        add("gpu-run", check_severity::info, component, f.rel, res.fields.empty() ? "ok" : res.fields[0]);
    } else {
        add("gpu-run", check_severity::failure, component, f.rel, "on the GPU: " + failure);
    }
}

void checker::collect_children(std::vector<child_job>& jobs, driver_info& driver) {
    for (auto& j : jobs) {
        if (!j.child) continue;
        const auto out = j.child->wait(j.meta.size());
        for (std::size_t k = 0; k < j.meta.size(); ++k) {
            const auto& res = out.ops[k];
            // Never reached: the operation that killed the child is reported.
            if (!res.done && !res.begun && out.spawn_error.empty() && k != 0) continue;
            apply(j.meta[k], res, op_failure(out, res), driver);
        }
    }
}

result<check_report> checker::run() {
    const auto started = std::chrono::steady_clock::now();
    report_.prefix = o_.prefix;
    report_.components = receipts_.size();
    for (const char* d : {"lib", "lib64"})
        if (std::error_code ec; fs::is_directory(o_.prefix / d, ec)) prefix_dirs_.push_back(o_.prefix / d);
    resolver_.emplace(o_, prefix_dirs_);
    scan_files();
    find_shadow_candidates();
    const bool full = o_.depth == check_depth::full || o_.gpu;
    report_.depth = full ? check_depth::full : check_depth::quick;
    auto jobs = plan_children(full);

    std::string ld_path;
    for (const auto& d : prefix_dirs_) ld_path += (ld_path.empty() ? "" : ":") + d.string();
    for (const auto& d : resolver_->ld_library_path()) ld_path += (ld_path.empty() ? "" : ":") + d.string();
    // The children work while we resolve: the slowest of them sets the time.
    for (auto& j : jobs) {
        if (j.ops.empty()) continue;
        j.flags.insert(j.flags.end(), j.ops.begin(), j.ops.end());
        j.child.emplace(o_, j.flags, j.ld_path.value_or(ld_path));
    }

    check_resolution();
    check_runtime_dependencies();
    check_file_versions();
    check_header_versions();

    driver_info driver;
    collect_children(jobs, driver);
    if (reused_driver_) driver = *reused_driver_;
    check_shadows();
    if (!o_.compute_capabilities.empty()) {
        driver.gpus.clear();
        for (const auto& c : o_.compute_capabilities)
            driver.gpus.push_back({static_cast<int>(driver.gpus.size()), c.major, c.minor, "target"});
    }
    const auto gpus = driver.gpus;
    evaluate_driver(std::move(driver));
    check_gpu_code(gpus);
    if (o_.gpu && driver_.libcuda.empty())
        add("gpu-run", check_severity::failure, "", "", "--gpu: no NVIDIA driver (libcuda.so.1) to run on");
    report_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return std::move(report_);
}

}  // namespace

namespace {

// deps: what the installed releases need of the CUDA toolkit
// (dependencies.hpp) that no receipt in `all` provides, once per release
// and CUDA major of the `checked` receipts. A warning: a system CUDA may
// provide them, but nothing in the prefix says so.
std::vector<check_finding> dependency_findings(const std::vector<receipt>& checked, const std::vector<receipt>& all,
                                               const fs::path& prefix) {
    std::vector<check_finding> out;
    std::set<std::string> said;
    for (const auto& r : checked) {
        const auto major = r.variant ? cuda_major_of(r) : std::nullopt;
        const auto deps = major ? dependencies_of(r.product, r.release_label, *major) : std::nullopt;
        if (!deps || !said.insert(r.product + " " + r.release_label + " " + std::to_string(*major)).second) continue;
        const auto missing = missing_dependencies(*deps, all);
        if (missing.empty()) continue;
        std::string names, csv;
        for (const auto& c : missing) {
            names += (names.empty() ? "" : ", ") + c;
            csv += (csv.empty() ? "" : ",") + c;
        }
        const auto release = installed_dependency_release(*deps, all).value_or(std::to_string(*major));
        out.push_back({"deps", check_severity::warning, r.component, "",
                       r.product + " " + r.release_label + " (CUDA " + std::to_string(*major) + ") needs " + names +
                           " of the " + deps->product +
                           " product, which this prefix lacks (a CUDA toolkit elsewhere "
                           "may provide them); add them with `redist fetch " +
                           deps->product + " " + release + " --component " + csv + " --prefix " + prefix.string() +
                           "`, or fetch " + r.product + " again with --with-deps"});
    }
    return out;
}

}  // namespace

result<check_report> run_checks(const check_options& options) {
    REDIST_TRY(auto receipts, read_installed_receipts(options.prefix, "nothing to check"));
    const std::vector<receipt> all = receipts;
    if (!options.components.empty()) {
        std::vector<receipt> chosen;
        for (const auto& name : options.components) {
            auto it = std::ranges::find(receipts, name, &receipt::component);
            if (it == receipts.end())
                return make_error(error_code::not_found, "component '" + name + "' is not installed in this prefix")
                    .with_path(options.prefix.string());
            chosen.push_back(*it);
        }
        receipts = std::move(chosen);
    }
    auto deps = dependency_findings(receipts, all, options.prefix);
    checker c(options, std::move(receipts));
    REDIST_TRY(auto report, c.run());
    report.findings.insert(report.findings.end(), deps.begin(), deps.end());
    return report;
}

}  // namespace redist
