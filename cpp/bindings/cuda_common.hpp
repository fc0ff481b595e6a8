#pragma once
// Shared by the CUDA entry points (cuda.cpp, cuda_pool.cpp, cuda_stats.cpp): CUDA arrays borrowed from DLPack
// capsules, outputs allocated on the device and handed back as DLPack capsules, and the reports of bad input
// that kernels find after the call has returned (no host synchronisation in a device-array call).
//
// The DLPack entry points of an op take its inputs as capsules (None for an absent optional input), then its
// outputs: None to have them allocated here (returned as a tuple of capsules, each owning a share of one
// stream-ordered allocation) or a tuple of caller-allocated capsules, then the op's scalars and the stream.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"

#ifdef TOPOROUTE_WITH_CUDA
#include "launch.hpp"
#endif

namespace toporoute::bindings {

namespace py = pybind11;

/// Element types of device arrays. mask is bool (or uint8); u64 also accepts int64 (the same bits).
enum class DType { f32, mask, i32, u64, i64, f64, u32 };

const char* dtype_name(DType t);
std::size_t dtype_size(DType t);

/// A CUDA array borrowed from a DLPack capsule (the capsule stays unconsumed; its producer owns the memory).
/// Default-constructed = absent argument.
struct DeviceArray {
  void* data = nullptr;
  int device = -1;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;  // in elements
  bool present() const { return device >= 0; }
  std::int64_t size() const;  // number of elements
};

/// The array in capsule `obj` (checked: a CUDA array of dtype `want` and rank `ndim`), naming `name` in errors.
DeviceArray device_array(const py::handle& obj, const char* name, int ndim, DType want);
/// device_array, or an absent array for None.
DeviceArray optional_device_array(const py::handle& obj, const char* name, int ndim, DType want);
/// Raises ShapeError unless a.shape == expected.
void expect_device_shape(const DeviceArray& a, const char* name, const std::vector<std::int64_t>& expected);
/// Raises InvalidArgumentError unless every present array lives on the first one's device.
void expect_same_device(std::initializer_list<std::pair<const DeviceArray*, const char*>> arrays);
/// C-contiguous (axes of extent 1 and empty arrays impose no stride).
bool is_c_contiguous(const std::int64_t* shape, const std::int64_t* strides, std::size_t ndim);

/// Raises DTypeError unless a given view (HostView, FastView or DeviceArray) is C-contiguous.
template <class View>
void require_c_contiguous(const View& v, const char* name) {
  if (!v.present()) return;
  const std::size_t ndim = std::size(v.shape);
  if (!is_c_contiguous(std::data(v.shape), std::data(v.strides), ndim)) {
    const std::vector<std::int64_t> strides(std::data(v.strides), std::data(v.strides) + ndim);
    raise_error("DTypeError", name, std::string(name) + " must be C-contiguous; got strides " + shape_str(strides));
  }
}

/// Raises DTypeError unless the last axis of a device array has unit stride (rows are read as vectors); empty
/// arrays and rows of one element impose nothing.
void require_unit_last_stride(const DeviceArray& a, const char* name);

/// A bad-input report decoded from a kernel's error code: the toporoute.errors class, the argument, the message.
struct DeviceError {
  const char* cls = "InvalidArgumentError";
  std::string arg;
  std::string message;
};
using DecodeError = std::function<DeviceError(unsigned long long code)>;

/// Raises the report of the earliest finished device call on `device` whose kernels found bad input (and
/// forgets every finished call); a call still running is left for later. Cheap: reads host memory only.
void poll_device_errors(int device);
/// Waits for all work on `device` (every device with calls in flight when device < 0), then polls.
void synchronize_devices(int device);

#ifdef TOPOROUTE_WITH_CUDA

/// The error report of one asynchronous device call: poll earlier calls' reports first, pass sink() to the
/// launcher, and commit() once it returned ok (a call that launched nothing is forgotten).
class AsyncCall {
 public:
  AsyncCall(int device, const char* op);
  AsyncCall(const AsyncCall&) = delete;
  AsyncCall& operator=(const AsyncCall&) = delete;
  const cuda::ErrorSink& sink() const { return sink_; }
  void commit(DecodeError decode);

 private:
  int device_;
  const char* op_;
  std::size_t slot_ = 0;
  bool launched_ = false;
  cuda::ErrorSink sink_;
};

/// The outputs of one device call: C-contiguous arrays in one stream-ordered allocation (when the caller gave
/// none) or the caller's capsules (checked against the declared shapes and dtypes).
class DeviceOutputs {
 public:
  /// `given`: None, or a tuple of capsules in declaration order.
  DeviceOutputs(const char* op, int device, std::uintptr_t stream, const py::object& given);
  ~DeviceOutputs();
  DeviceOutputs(const DeviceOutputs&) = delete;
  DeviceOutputs& operator=(const DeviceOutputs&) = delete;
  /// Declares output `name`; returns its index.
  int add(const char* name, DType dtype, std::vector<std::int64_t> shape);
  /// Allocates (or reads the given capsules); call after every add.
  void allocate();
  template <typename T>
  T* data(int i) const {
    return static_cast<T*>(items_[static_cast<std::size_t>(i)].data);
  }
  /// The tuple the entry point returns: new capsules for allocated outputs, the given capsules otherwise.
  py::object result();

 private:
  struct Item {
    const char* name;
    DType dtype;
    std::vector<std::int64_t> shape;
    std::size_t offset = 0;
    void* data = nullptr;
  };
  const char* op_;
  int device_;
  std::uintptr_t stream_;
  py::object given_;
  std::vector<Item> items_;
  void* base_ = nullptr;
  std::size_t bytes_ = 0;
};

/// Declares route's outputs in `out` (route and route_indexed): scores f32 (B,N,N), adjacency bool (B,N,N),
/// inbox i32 (B,N,K), in_degree i32 (B,N).
void add_route_outputs(DeviceOutputs& out, const RouteArgs& a);
/// The core's view of the outputs add_route_outputs declared (after out.allocate()).
RouteOut route_outputs(const DeviceOutputs& out);

#endif  // TOPOROUTE_WITH_CUDA

[[noreturn]] void cuda_unavailable();

inline void* stream_handle(std::uintptr_t stream) { return reinterpret_cast<void*>(stream); }

}  // namespace toporoute::bindings
