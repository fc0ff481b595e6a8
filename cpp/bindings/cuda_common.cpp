// Shared machinery of the CUDA entry points: see cuda_common.hpp.
#include "cuda_common.hpp"

#include <pybind11/pybind11.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dlpack.hpp"

namespace toporoute::bindings {

const char* dtype_name(DType t) {
  static constexpr const char* kNames[] = {"float32", "bool (or uint8)", "int32", "uint64", "int64", "float64",
                                           "uint32"};  // DType order
  return kNames[static_cast<int>(t)];
}

namespace {

// What each DType is exported as (DType order); the bits give its element size too.
constexpr dlpack::DLDataType kDlTypes[] = {
    {dlpack::kDLFloat, 32, 1}, {dlpack::kDLBool, 8, 1}, {dlpack::kDLInt, 32, 1},  {dlpack::kDLUInt, 64, 1},
    {dlpack::kDLInt, 64, 1},   {dlpack::kDLFloat, 64, 1}, {dlpack::kDLUInt, 32, 1}};

dlpack::DLDataType dl_dtype(DType t) { return kDlTypes[static_cast<int>(t)]; }

}  // namespace

std::size_t dtype_size(DType t) { return kDlTypes[static_cast<int>(t)].bits / 8u; }

namespace {

bool dtype_matches(const dlpack::DLDataType& dt, DType want) {
  const dlpack::DLDataType& exported = kDlTypes[static_cast<int>(want)];
  if (dt.lanes != 1 || dt.bits != exported.bits) return false;
  if (dt.code == exported.code) return true;
  // bool also as uint8; uint64 also as int64 (the same bits for -1: frameworks without uint64 kernels hand over
  // int64)
  return (want == DType::mask && dt.code == dlpack::kDLUInt) || (want == DType::u64 && dt.code == dlpack::kDLInt);
}

}  // namespace

std::int64_t DeviceArray::size() const {
  std::int64_t n = 1;
  for (const std::int64_t s : shape) n *= s;
  return n;
}

DeviceArray device_array(const py::handle& obj, const char* name, int ndim, DType want) {
  PyObject* cap = obj.ptr();
  if (!PyCapsule_CheckExact(cap)) {
    raise_error("DTypeError", name,
                std::string(name) + " must be a DLPack capsule of a CUDA array; got " +
                    std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
  }
  auto* managed = static_cast<dlpack::DLManagedTensor*>(PyCapsule_GetPointer(cap, dlpack::kCapsuleName));
  if (managed == nullptr) {
    PyErr_Clear();
    const char* got = PyCapsule_GetName(cap);
    PyErr_Clear();
    raise_error("InvalidArgumentError", name,
                std::string(name) + " must be an unconsumed DLPack capsule named 'dltensor'; got one named '" +
                    (got != nullptr ? got : "") + "'");
  }
  const dlpack::DLTensor& t = managed->dl_tensor;
  if (t.device.device_type != dlpack::kDLCUDA && t.device.device_type != dlpack::kDLCUDAManaged) {
    raise_error("InvalidArgumentError", name,
                std::string(name) + " must be a CUDA device array; got DLPack device type " +
                    std::to_string(t.device.device_type));
  }
  if (!dtype_matches(t.dtype, want)) {
    raise_error("DTypeError", name,
                std::string(name) + " must have dtype " + dtype_name(want) + "; got DLPack dtype (code " +
                    std::to_string(t.dtype.code) + ", bits " + std::to_string(t.dtype.bits) + ", lanes " +
                    std::to_string(t.dtype.lanes) + ")");
  }
  if (t.ndim != ndim) {
    raise_error("ShapeError", name,
                std::string(name) + " must have " + std::to_string(ndim) + " dimensions; got " + std::to_string(t.ndim));
  }
  DeviceArray a;
  a.device = t.device.device_id;
  a.data = t.data == nullptr ? nullptr : static_cast<char*>(t.data) + t.byte_offset;
  a.shape.assign(t.shape, t.shape + ndim);
  a.strides.assign(static_cast<std::size_t>(ndim), 1);
  if (t.strides != nullptr) {
    a.strides.assign(t.strides, t.strides + ndim);
  } else {
    for (int d = ndim - 1; d > 0; --d) a.strides[d - 1] = a.strides[d] * a.shape[d];
  }
  return a;
}

DeviceArray optional_device_array(const py::handle& obj, const char* name, int ndim, DType want) {
  if (obj.is_none()) return {};
  return device_array(obj, name, ndim, want);
}

void expect_device_shape(const DeviceArray& a, const char* name, const std::vector<std::int64_t>& expected) {
  if (a.shape != expected) {
    raise_error("ShapeError", name,
                std::string(name) + " must have shape " + shape_str(expected) + "; got " + shape_str(a.shape));
  }
}

void expect_same_device(std::initializer_list<std::pair<const DeviceArray*, const char*>> arrays) {
  const std::pair<const DeviceArray*, const char*>* first = nullptr;
  for (const auto& entry : arrays) {
    if (!entry.first->present()) continue;
    if (first == nullptr) {
      first = &entry;
    } else if (entry.first->device != first->first->device) {
      raise_error("InvalidArgumentError", entry.second,
                  std::string(entry.second) + " must be on the same CUDA device as " + first->second + " (cuda:" +
                      std::to_string(first->first->device) + "); got cuda:" + std::to_string(entry.first->device));
    }
  }
}

bool is_c_contiguous(const std::int64_t* shape, const std::int64_t* strides, std::size_t ndim) {
  for (std::size_t d = 0; d < ndim; ++d) {
    if (shape[d] == 0) return true;
  }
  std::int64_t expected = 1;
  for (std::size_t d = ndim; d-- > 0;) {
    if (shape[d] > 1 && strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

void require_unit_last_stride(const DeviceArray& a, const char* name) {
  if (!a.present() || a.shape.empty() || a.size() == 0 || a.shape.back() <= 1 || a.strides.back() == 1) return;
  raise_error("DTypeError", name,
              std::string(name) + " must be contiguous along its last axis (stride 1); got stride " +
                  std::to_string(a.strides.back()) + " elements: pass a contiguous copy of " + name);
}

[[noreturn]] void cuda_unavailable() {
  raise_error("BackendUnavailableError", "",
              "toporoute was built without CUDA (no CUDA compiler was found when the package was built); "
              "reinstall with nvcc available (TOPOROUTE_CUDA=ON), or use backend='cpu'");
}

#ifdef TOPOROUTE_WITH_CUDA

namespace {

constexpr std::size_t kSlots = cuda::ErrorLog::kSlots;

struct Pending {
  std::size_t slot;
  unsigned long long seq;
  const char* op;
  DecodeError decode;
};

// What the bindings keep per device: the error slots and the calls whose reports are not read yet. Like the
// CUDA runtime's own per-device state it lives for the process; every access holds the GIL.
struct DeviceState {
  std::unique_ptr<cuda::ErrorLog> log;
  std::deque<Pending> pending;
  unsigned long long next_seq = 1;
};

std::vector<std::unique_ptr<DeviceState>>& device_states() {
  static std::vector<std::unique_ptr<DeviceState>> states;
  return states;
}

DeviceState* find_state(int device) {
  auto& states = device_states();
  if (device < 0 || static_cast<std::size_t>(device) >= states.size()) return nullptr;
  return states[static_cast<std::size_t>(device)].get();
}

DeviceState& state(int device) {
  if (DeviceState* s = find_state(device)) return *s;
  if (device < 0) raise_error("InvalidArgumentError", "device", "device must be >= 0; got " + std::to_string(device));
  auto made = std::make_unique<DeviceState>();
  run_core("cuda error log", [&] { return cuda::ErrorLog::create(device, &made->log); });
  auto& states = device_states();
  if (states.size() <= static_cast<std::size_t>(device)) states.resize(static_cast<std::size_t>(device) + 1);
  states[static_cast<std::size_t>(device)] = std::move(made);
  return *states[static_cast<std::size_t>(device)];
}

// Forgets every finished call; returns the report of the earliest one that found bad input (cls null if none).
DeviceError collect(DeviceState& st, int device) {
  DeviceError first;
  first.cls = nullptr;
  for (auto it = st.pending.begin(); it != st.pending.end();) {
    unsigned long long code = cuda::kNoError;
    if (!st.log->finished(it->slot, it->seq, &code)) {
      ++it;
      continue;
    }
    if (code != cuda::kNoError && first.cls == nullptr) {
      first = it->decode(code);
      first.message += " (found on cuda:" + std::to_string(device) + " by an earlier " + it->op +
                       " call on device arrays: the GPU reports bad input at the next toporoute call on the device "
                       "or at toporoute.backends.cuda.synchronize())";
    }
    it = st.pending.erase(it);
  }
  return first;
}

void raise_collected(DeviceState& st, int device) {
  DeviceError e = collect(st, device);
  if (e.cls != nullptr) raise_error(e.cls, e.arg, e.message);
}

}  // namespace

void poll_device_errors(int device) {
  if (DeviceState* st = find_state(device); st != nullptr && !st->pending.empty()) raise_collected(*st, device);
}

void synchronize_devices(int device) {
  auto& states = device_states();
  for (std::size_t d = 0; d < states.size(); ++d) {
    if (states[d] == nullptr || (device >= 0 && static_cast<int>(d) != device)) continue;
    run_core("synchronize", [&] { return cuda::synchronize_device(static_cast<int>(d)); });
    // a finished kernel has written its report; one that never finished (a broken context) raised above
    raise_collected(*states[d], static_cast<int>(d));
  }
  if (device >= 0 && find_state(device) == nullptr) {
    run_core("synchronize", [&] { return cuda::synchronize_device(device); });
  }
}

AsyncCall::AsyncCall(int device, const char* op) : device_(device), op_(op) {
  DeviceState& st = state(device);
  if (!st.pending.empty()) raise_collected(st, device);
  const unsigned long long seq = st.next_seq;
  // the slot seq % kSlots was last used by call seq - kSlots: wait until it is done (1024 calls in flight)
  while (!st.pending.empty() && st.pending.front().seq + kSlots <= seq) {
    run_core(op, [&] { return cuda::synchronize_device(device); });
    raise_collected(st, device);
    if (!st.pending.empty() && st.pending.front().seq + kSlots <= seq) {
      // the device finished all work and that call never reported: its kernel did not run to the end
      st.pending.pop_front();
    }
  }
  st.next_seq = seq + 1;
  slot_ = static_cast<std::size_t>(seq % kSlots);
  sink_ = st.log->sink(slot_, seq);
  sink_.launched = &launched_;
}

void AsyncCall::commit(DecodeError decode) {
  if (!launched_) return;
  state(device_).pending.push_back(Pending{slot_, sink_.seq, op_, std::move(decode)});
}

// ----------------------------------------------------------------------------------------- outputs

namespace {

// One stream-ordered allocation shared by the outputs of a call; freed (on the call's stream) with the last.
struct Block {
  int device;
  void* base;
  void* stream;
  ~Block() { cuda::device_free_async(device, base, stream); }
};

struct Exported {
  dlpack::DLManagedTensor managed{};
  std::shared_ptr<Block> block;
  std::vector<std::int64_t> shape;
};

void delete_exported(dlpack::DLManagedTensor* self) { delete static_cast<Exported*>(self->manager_ctx); }

void capsule_destructor(PyObject* capsule) {
  // a consumer renames the capsule "used_dltensor" and calls the deleter itself
  if (!PyCapsule_IsValid(capsule, dlpack::kCapsuleName)) {
    PyErr_Clear();
    return;
  }
  auto* managed = static_cast<dlpack::DLManagedTensor*>(PyCapsule_GetPointer(capsule, dlpack::kCapsuleName));
  if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
}

}  // namespace

DeviceOutputs::DeviceOutputs(const char* op, int device, std::uintptr_t stream, const py::object& given)
    : op_(op), device_(device), stream_(stream), given_(given) {}

DeviceOutputs::~DeviceOutputs() { cuda::device_free_async(device_, base_, stream_handle(stream_)); }

int DeviceOutputs::add(const char* name, DType dtype, std::vector<std::int64_t> shape) {
  items_.push_back(Item{name, dtype, std::move(shape)});
  return static_cast<int>(items_.size()) - 1;
}

void DeviceOutputs::allocate() {
  if (!given_.is_none()) {
    const py::tuple given = py::reinterpret_borrow<py::tuple>(given_);
    if (!PyTuple_Check(given_.ptr()) || given.size() != items_.size()) {
      raise_error("InvalidArgumentError", "out",
                  std::string(op_) + ": out must be None or a tuple of " + std::to_string(items_.size()) +
                      " DLPack capsules");
    }
    for (std::size_t i = 0; i < items_.size(); ++i) {
      Item& it = items_[i];
      const DeviceArray a = device_array(given[i], it.name, static_cast<int>(it.shape.size()), it.dtype);
      expect_device_shape(a, it.name, it.shape);
      require_c_contiguous(a, it.name);
      if (a.device != device_) {
        raise_error("InvalidArgumentError", it.name,
                    std::string(it.name) + " must be on cuda:" + std::to_string(device_) + "; got cuda:" +
                        std::to_string(a.device));
      }
      it.data = a.data;
    }
    return;
  }
  std::size_t total = 0;
  for (Item& it : items_) {
    std::size_t n = dtype_size(it.dtype);
    for (const std::int64_t s : it.shape) n *= static_cast<std::size_t>(s);
    it.offset = total;
    total += (n + 255) / 256 * 256;
  }
  bytes_ = total > 0 ? total : 256;  // never a null pointer, even for empty outputs
  // a pool allocation takes about a microsecond: no GIL release around it
  raise_status(cuda::device_alloc_async(device_, bytes_, stream_handle(stream_), &base_));
  for (Item& it : items_) it.data = static_cast<char*>(base_) + it.offset;
}

py::object DeviceOutputs::result() {
  if (!given_.is_none()) return given_;
  std::shared_ptr<Block> block(new Block{device_, base_, stream_handle(stream_)});
  base_ = nullptr;
  py::tuple out(items_.size());
  for (std::size_t i = 0; i < items_.size(); ++i) {
    const Item& it = items_[i];
    auto* e = new Exported();
    e->block = block;
    e->shape = it.shape;
    dlpack::DLTensor& t = e->managed.dl_tensor;
    t.data = it.data;
    t.device = {dlpack::kDLCUDA, device_};
    t.ndim = static_cast<std::int32_t>(it.shape.size());
    t.dtype = dl_dtype(it.dtype);
    t.shape = e->shape.data();
    t.strides = nullptr;  // C-contiguous
    t.byte_offset = 0;
    e->managed.manager_ctx = e;
    e->managed.deleter = delete_exported;
    PyObject* cap = PyCapsule_New(&e->managed, dlpack::kCapsuleName, capsule_destructor);
    if (cap == nullptr) {
      delete e;
      throw py::error_already_set();
    }
    out[i] = py::reinterpret_steal<py::object>(cap);
  }
  return out;
}

void add_route_outputs(DeviceOutputs& out, const RouteArgs& a) {
  out.add("scores", DType::f32, {a.B, a.N, a.N});
  out.add("adjacency", DType::mask, {a.B, a.N, a.N});
  out.add("inbox", DType::i32, {a.B, a.N, a.K});
  out.add("in_degree", DType::i32, {a.B, a.N});
}

RouteOut route_outputs(const DeviceOutputs& out) {
  return {out.data<float>(0), out.data<std::uint8_t>(1), out.data<std::int32_t>(2), out.data<std::int32_t>(3)};
}

#else  // built without CUDA

void poll_device_errors(int) {}
void synchronize_devices(int) { cuda_unavailable(); }

#endif  // TOPOROUTE_WITH_CUDA

}  // namespace toporoute::bindings
