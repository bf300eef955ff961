// SPDX-License-Identifier: Apache-2.0
// The compiled PyTorch binding of qkvfuse: the torch.ops.qkvfuse operators, their
// schemas (TORCH_LIBRARY), and their CPU, Meta and CompositeExplicitAutograd
// kernels; the CUDA registrations are in qkvfuse_torch_cuda.cpp.
//
// The operators, argument names, schemas and every message are those of the
// Python registration (python/qkvfuse/torch_ops.py), so that torch.ops.qkvfuse.*
// means the same thing whichever binding registered it; the checks run in the
// same order there and here, and python/tests/test_bindings.py compares the two.
// An error is thrown as the c10 class of the status's Python base class
// (ValueError, TypeError, IndexError, NotImplementedError, RuntimeError) with the
// text str() gives the package's exception: "[where: ]message [STATUS_NAME]";
// qkvfuse.errors.translate() turns it back into that exception.
#include "qkvfuse_torch.h"

#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/SymInt.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "qkvfuse.h"

namespace qkvfuse_ext {

CudaStreamFn cuda_stream_fn = nullptr;

namespace {

// ---- messages ----------------------------------------------------------------

[[noreturn]] void fail(qkvfuse_status status, const std::string &message, const char *where = nullptr) {
  std::string text;
  if (where != nullptr) {
    text += where;
    text += ": ";
  }
  text += message;
  text += " [";
  text += qkvfuse_status_string(status);
  text += "]";
  switch (status) {
    case QKVFUSE_ERROR_DTYPE: throw c10::TypeError(text);
    case QKVFUSE_ERROR_OUT_OF_RANGE: throw c10::IndexError(text);
    case QKVFUSE_ERROR_UNSUPPORTED: throw c10::NotImplementedError(text);
    case QKVFUSE_ERROR_CUDA:
    case QKVFUSE_ERROR_OUT_OF_MEMORY:
    case QKVFUSE_ERROR_VERSION: throw c10::Error(text);
    default: throw c10::ValueError(text);
  }
}

[[noreturn]] void fail_library(qkvfuse_status status, const char *where) {
  const char *m = qkvfuse_last_error();
  fail(status, m ? m : "", where);
}

std::string i2s(int64_t v) { return std::to_string(v); }

std::string u128(unsigned __int128 v) {
  if (v == 0) return "0";
  char buf[48];
  int n = 0;
  while (v > 0) {
    buf[n++] = static_cast<char>('0' + static_cast<int>(v % 10));
    v /= 10;
  }
  std::string s(n, '0');
  for (int i = 0; i < n; i++) s[i] = buf[n - 1 - i];
  return s;
}

// Python's repr() of a float: the shortest round-trip digits, scientific when
// the exponent is < -4 or >= 16.
std::string py_float(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string s(buf, r.ptr);
  std::string sign;
  if (s[0] == '-') {
    sign = "-";
    s = s.substr(1);
  }
  const size_t e = s.find('e');
  std::string digits = s.substr(0, 1) + (e > 1 ? s.substr(2, e - 2) : "");
  const int exp = std::stoi(s.substr(e + 1));
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out;
  if (exp < -4 || exp >= 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += eb;
  } else if (exp < 0) {
    out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  } else {
    const size_t point = static_cast<size_t>(exp) + 1;
    if (digits.size() <= point) {
      out = digits + std::string(point - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, point) + "." + digits.substr(point);
    }
  }
  return sign + out;
}

// Python's repr() of a str (ASCII escapes as Python writes them; other
// characters kept as their UTF-8 bytes).
std::string py_str(Str s) {
  const bool has_single = s.find('\'') != Str::npos, has_double = s.find('"') != Str::npos;
  const char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == static_cast<unsigned char>(q) || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += ch;
    }
  }
  out += q;
  return out;
}

// _check._show: repr cut to 60 characters, with its type
std::string show_list(c10::IntArrayRef v) {
  std::string r = "[";
  for (size_t i = 0; i < v.size(); i++) r += (i ? ", " : "") + i2s(v[i]);
  r += "]";
  if (r.size() > 60) r = r.substr(0, 57) + "...";
  return r + " (list)";
}

std::string shape_tuple(c10::IntArrayRef v) {
  std::string r = "(";
  for (size_t i = 0; i < v.size(); i++) r += (i ? ", " : "") + i2s(v[i]);
  if (v.size() == 1) r += ",";
  return r + ")";
}

// torch's Python name of a dtype ("float32", not c10's "Float")
std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kByte: return "uint8";
    case at::kChar: return "int8";
    case at::kShort: return "int16";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    case at::kHalf: return "float16";
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kComplexHalf: return "complex32";
    case at::kComplexFloat: return "complex64";
    case at::kComplexDouble: return "complex128";
    case at::kBool: return "bool";
    case at::kBFloat16: return "bfloat16";
    case at::kQInt8: return "qint8";
    case at::kQUInt8: return "quint8";
    case at::kQInt32: return "qint32";
    case at::kFloat8_e5m2: return "float8_e5m2";
    case at::kFloat8_e4m3fn: return "float8_e4m3fn";
    case at::kFloat8_e5m2fnuz: return "float8_e5m2fnuz";
    case at::kFloat8_e4m3fnuz: return "float8_e4m3fnuz";
    case at::kUInt16: return "uint16";
    case at::kUInt32: return "uint32";
    case at::kUInt64: return "uint64";
    default: {
      std::string s = c10::toString(t);
      for (auto &c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return s;
    }
  }
}

const char *const HANDLED = "int8, int32, int64, float16, float32, bfloat16, float8_e4m3fn, float8_e5m2";

qkvfuse_dtype qdtype(at::ScalarType t) {
  switch (t) {
    case at::kChar: return QKVFUSE_DTYPE_INT8;
    case at::kInt: return QKVFUSE_DTYPE_INT32;
    case at::kLong: return QKVFUSE_DTYPE_INT64;
    case at::kHalf: return QKVFUSE_DTYPE_FLOAT16;
    case at::kFloat: return QKVFUSE_DTYPE_FLOAT32;
    case at::kBFloat16: return QKVFUSE_DTYPE_BFLOAT16;
    case at::kFloat8_e4m3fn: return QKVFUSE_DTYPE_FLOAT8_E4M3FN;
    case at::kFloat8_e5m2: return QKVFUSE_DTYPE_FLOAT8_E5M2;
    default: return QKVFUSE_DTYPE_NONE;
  }
}

// _arrays.dtype_of: the qkvfuse name of a tensor's dtype, or the error naming it
void check_handled(const Tensor &x, const char *name) {
  if (qdtype(x.scalar_type()) == QKVFUSE_DTYPE_NONE) {
    fail(QKVFUSE_ERROR_DTYPE, std::string(name) + ": qkvfuse handles " + HANDLED + "; got " +
                                  dtype_name(x.scalar_type()));
  }
}

// ---- devices -------------------------------------------------------------------

struct DevKey {
  c10::DeviceType type;
  int index;
  bool operator!=(const DevKey &o) const { return type != o.type || index != o.index; }
};

DevKey dev_key(const at::Device &d) {
  return {d.type(), d.type() == c10::DeviceType::CPU ? 0 : (d.has_index() ? d.index() : 0)};
}

std::string dev_text(const DevKey &k) {
  std::string t = c10::DeviceTypeName(k.type, /*lower_case=*/true);
  return k.type == c10::DeviceType::CUDA ? t + ":" + i2s(k.index) : t;
}

// _check.same_device: every tensor on the device of the first one (or of `ref`).
class SameDevice {
 public:
  SameDevice() = default;
  SameDevice(const Tensor &ref, const char *ref_name) : has_(true), dev_(dev_key(ref.device())), ref_(ref_name) {}
  void operator()(const char *name, const Tensor &x) {
    const DevKey k = dev_key(x.device());
    if (!has_) {
      has_ = true;
      dev_ = k;
      ref_ = name;
    } else if (k != dev_) {
      fail(QKVFUSE_ERROR_DEVICE,
           std::string(name) + ": on " + dev_text(k) + ", but the call is on " + dev_text(dev_) + " (" + ref_ + ")");
    }
  }
  void operator()(const char *name, const OptTensor &x) {
    if (x.has_value()) (*this)(name, *x);
  }

 private:
  bool has_ = false;
  DevKey dev_{c10::DeviceType::CPU, 0};
  const char *ref_ = "";
};

// torch_ops._computing_device
void computing_device(const Tensor &x, const char *name) {
  if (!x.is_cpu() && !x.is_cuda()) {
    fail(QKVFUSE_ERROR_DEVICE, std::string(name) + ": tensors must be on cpu or cuda; got " +
                                   dev_text(dev_key(x.device())));
  }
}

// ---- tensors as qkvfuse_tensor -----------------------------------------------------

// _arrays.describe for a torch tensor
void describe(const Tensor &x, const char *name, qkvfuse_tensor *t) {
  const qkvfuse_dtype dt = qdtype(x.scalar_type());
  if (dt == QKVFUSE_DTYPE_NONE) {
    fail(QKVFUSE_ERROR_DTYPE, std::string(name) + ": dtype " + dtype_name(x.scalar_type()) +
                                  " is not one qkvfuse handles (" + HANDLED + ")");
  }
  if (!x.is_cpu() && !x.is_cuda()) {  // a meta tensor has no bytes: it must never reach the library
    fail(QKVFUSE_ERROR_DEVICE, std::string(name) + ": tensors must be on cpu or cuda; got " +
                                   dev_text(dev_key(x.device())));
  }
  if (x.layout() != c10::kStrided) {
    std::ostringstream lay;  // Layout.h's own printer ("Sparse"): c10::toString(Layout) would print TensorOptions
    lay << x.layout();
    std::string py = x.layout() == c10::kSparse      ? "torch.sparse_coo"
                     : x.layout() == c10::kSparseCsr ? "torch.sparse_csr"
                     : x.layout() == c10::kSparseCsc ? "torch.sparse_csc"
                     : x.layout() == c10::kSparseBsr ? "torch.sparse_bsr"
                     : x.layout() == c10::kSparseBsc ? "torch.sparse_bsc"
                     : x.layout() == c10::kMkldnn    ? "torch._mkldnn"
                     : x.layout() == c10::kJagged    ? "torch.jagged"
                                                     : "torch." + lay.str();
    fail(QKVFUSE_ERROR_STRIDE, std::string(name) + ": expected a dense (strided) tensor; got layout " + py);
  }
  if (x.is_neg()) {  // a negative-bit view: its bytes hold the values before negation
    fail(QKVFUSE_ERROR_DTYPE, std::string(name) +
                                  ": a negative view (torch._neg_view) holds the un-negated bytes; materialize it "
                                  "with .resolve_neg()");
  }
  const int64_t ndim = x.dim();
  if (ndim > QKVFUSE_MAX_DIMS) {
    fail(QKVFUSE_ERROR_SHAPE, std::string(name) + ": at most " + i2s(QKVFUSE_MAX_DIMS) + " dims; got " + i2s(ndim));
  }
  const auto sizes = x.sizes();
  const auto strides = x.strides();
  bool special = false;
  for (int64_t k = 0; k < ndim; k++) {
    t->shape[k] = sizes[k];
    t->strides[k] = strides[k];
    special = special || sizes[k] <= 1;
  }
  if (special) {  // size-1 dims (and every dim of an empty tensor): the contiguous stride
    bool empty = false;
    for (int64_t k = 0; k < ndim; k++) empty = empty || sizes[k] == 0;
    int64_t inner = 1;
    for (int64_t k = ndim - 1; k >= 0; k--) {
      if (sizes[k] == 1 || empty) t->strides[k] = inner;
      inner *= sizes[k] > 1 ? sizes[k] : 1;
    }
  }
  t->data = x.numel() == 0 && x.data_ptr() == nullptr ? nullptr : x.data_ptr();
  t->dtype = dt;
  t->device_type = x.is_cuda() ? QKVFUSE_DEVICE_CUDA : QKVFUSE_DEVICE_CPU;
  t->device_id = x.is_cuda() ? x.device().index() : 0;
  t->ndim = static_cast<int32_t>(ndim);
}

// _arrays.flags_pointer
uint32_t *flags_pointer(const OptTensor &flags) {
  if (!flags.has_value()) return nullptr;
  const Tensor &f = *flags;
  if ((f.scalar_type() != at::kInt && f.scalar_type() != at::kUInt32) || f.numel() < 1) {
    fail(QKVFUSE_ERROR_DTYPE, "error_flags: expected a uint32 or int32 tensor with at least 1 element; got torch." +
                                  dtype_name(f.scalar_type()) + " " + shape_tuple(f.sizes()));
  }
  return static_cast<uint32_t *>(f.data_ptr());
}

// The tensors of one library call: described in the order they were added,
// after one device check over all of them (and error_flags).
template <size_t N>
class Described {
 public:
  void add(const char *name, const OptTensor &x) {
    if (x.has_value()) add(name, *x);
  }
  void add(const char *name, const Tensor &x) {
    names_[n_] = name;
    tensors_[n_] = &x;
    n_++;
  }
  // returns the descriptor pointers, indexed in the order of add()
  void describe_all(SameDevice &same, const OptTensor &error_flags) {
    for (size_t i = 0; i < n_; i++) same(names_[i], *tensors_[i]);
    same("error_flags", error_flags);
    for (size_t i = 0; i < n_; i++) describe(*tensors_[i], names_[i], &desc_[i]);
  }
  const qkvfuse_tensor *get(const Tensor *x) const {
    for (size_t i = 0; i < n_; i++)
      if (tensors_[i] == x) return &desc_[i];
    return nullptr;
  }
  const qkvfuse_tensor *get(const OptTensor &x) const { return x.has_value() ? get(&*x) : nullptr; }

 private:
  size_t n_ = 0;
  std::array<const char *, N> names_{};
  std::array<const Tensor *, N> tensors_{};
  std::array<qkvfuse_tensor, N> desc_{};
};

// ---- launching --------------------------------------------------------------------

// The device guard and stream of a call on `ref`'s device.
struct Launch {
  c10::OptionalDeviceGuard guard;
  void *stream = nullptr;
  explicit Launch(const Tensor &ref) {
    if (ref.is_cuda()) {
      guard.reset_device(ref.device());
      if (cuda_stream_fn == nullptr) {
        fail(QKVFUSE_ERROR_UNSUPPORTED, "this build of the qkvfuse torch extension has no CUDA part");
      }
      stream = cuda_stream_fn(ref.device().index());
    }
  }
};

// ---- option strings ------------------------------------------------------------------

template <size_t N>
int choice(Str v, const char *name, const std::array<const char *, N> &choices) {
  if (v.find('\0') != Str::npos) {
    fail(QKVFUSE_ERROR_INVALID_VALUE, std::string(name) + ": contains a NUL character (C would read only " +
                                          py_str(v.substr(0, v.find('\0'))) + "); got " + py_str(v));
  }
  for (size_t i = 0; i < N; i++)
    if (v == choices[i]) return static_cast<int>(i);
  std::string list;
  for (size_t i = 0; i < N; i++) list += (i ? ", " : "") + py_str(choices[i]);
  fail(QKVFUSE_ERROR_INVALID_VALUE, std::string(name) + ": expected one of " + list + "; got " + py_str(v));
}

void no_nul(Str v, const char *name) {
  if (v.find('\0') != Str::npos) {
    fail(QKVFUSE_ERROR_INVALID_VALUE, std::string(name) + ": contains a NUL character (C would read only " +
                                          py_str(v.substr(0, v.find('\0'))) + "); got " + py_str(v));
  }
}

// index i of each table is the enum value i of qkvfuse.h (after "auto" where there is one)
const std::array<const char *, 5> ROPE = {"auto", "none", "cos_sin_cache", "cos_sin", "computed"};
const std::array<const char *, 2> STYLE = {"neox", "interleaved"};
const std::array<const char *, 5> SCALING = {"none", "linear", "ntk", "llama3", "yarn"};
const std::array<const char *, 6> LAYOUT = {"auto", "none", "paged", "paged_hnd", "nz", "contiguous"};
const std::array<const char *, 6> QUANT = {"auto", "none", "int8_sym", "int8_asym", "fp8_e4m3", "fp8_e5m2"};
const std::array<const char *, 3> Q_QUANT = {"none", "fp8_e4m3", "fp8_e5m2"};
const std::array<const char *, 4> ROUNDING = {"fused", "unfused_parity", "ascend_triton", "cann"};
const std::array<const char *, 4> BACKEND = {"auto", "reference", "cpu", "cuda"};

// core.scaling_from_args
qkvfuse_rope_scaling scaling_from_args(Str type, c10::ArrayRef<double> params) {
  if (params.size() != 8) {
    fail(QKVFUSE_ERROR_INVALID_VALUE,
         "rope_scaling_params: expected the 8 numbers after a RopeScaling's type; got " + i2s(params.size()));
  }
  const double omp = params[1];
  if (!std::isfinite(omp) || omp != std::floor(omp)) {
    fail(QKVFUSE_ERROR_INVALID_VALUE, "rope_scaling.original_max_position: must be an integer; got " + py_float(omp));
  }
  const int t = choice(type, "rope_scaling.type", SCALING);
  if (!(omp >= -9223372036854775808.0 && omp < 9223372036854775808.0)) {
    char b[400];
    std::snprintf(b, sizeof b, "%.0f", omp);
    fail(QKVFUSE_ERROR_INVALID_VALUE, std::string("rope_scaling.original_max_position: ") + b +
                                          " is outside the range of the C type int64_t [-9223372036854775808, "
                                          "9223372036854775807]");
  }
  qkvfuse_rope_scaling s = QKVFUSE_ROPE_SCALING_INIT;
  s.type = static_cast<qkvfuse_rope_scaling_type>(t);
  s.factor = params[0];
  s.original_max_position = static_cast<int64_t>(omp);
  s.low_freq_factor = params[2];
  s.high_freq_factor = params[3];
  s.beta_fast = params[4];
  s.beta_slow = params[5];
  s.extrapolation_factor = params[6];
  s.attn_factor = params[7];
  return s;
}

// _check.real(v, name, "float"): a finite value that rounds to 0 or to infinity in float32
void float_representable(double v, const char *name) {
  if (v != 0.0 && std::isfinite(v)) {
    const double a = std::fabs(v);
    const bool zero = a <= std::ldexp(1.0, -150);
    if (zero || a >= std::ldexp(1.0, 128) - std::ldexp(1.0, 103)) {
      fail(QKVFUSE_ERROR_INVALID_VALUE, std::string(name) + ": " + py_float(v) +
                                            " is not representable as a C float (it rounds to " +
                                            (zero ? "0" : "infinity") + ")");
    }
  }
}

void int32_range(int64_t v, const char *name) {
  if (v < INT32_MIN || v > INT32_MAX) {
    fail(QKVFUSE_ERROR_INVALID_VALUE, std::string(name) + ": " + i2s(v) +
                                          " is outside the range of the C type int32_t [-2147483648, 2147483647]");
  }
}

// _check.integers(v, name, n) on a list from the schema
void n_integers(c10::IntArrayRef v, const char *name, size_t n) {
  if (v.size() != n) {
    fail(QKVFUSE_ERROR_INVALID_VALUE,
         std::string(name) + ": must have " + i2s(n) + " integers; got " + i2s(v.size()) + ": " + show_list(v));
  }
}

void need_dim(const Tensor &x, const char *name) {
  if (x.dim() == 0) fail(QKVFUSE_ERROR_SHAPE, std::string(name) + ": expected at least 1 dim; got a 0-d tensor");
}

int64_t last_dim(const Tensor &x, const char *name) {
  need_dim(x, name);
  return x.size(-1);
}

std::string sym_str(const c10::SymInt &s) {
  if (auto v = s.maybe_as_int()) return i2s(*v);
  std::ostringstream os;
  os << s;
  return os.str();
}

std::string sym_tuple(c10::SymIntArrayRef v) {
  std::string r = "(";
  for (size_t i = 0; i < v.size(); i++) r += (i ? ", " : "") + sym_str(v[i]);
  if (v.size() == 1) r += ",";
  return r + ")";
}

// _check.output_sizes: each part >= 0 and their total the input's row width
// (symbolic under torch.compile: the comparison guards on it, as Python's does)
struct Part {
  const char *name;
  int64_t value;
};
template <size_t N>
void output_sizes(const std::array<Part, N> &parts, const char *formula, unsigned __int128 total, const Tensor &x,
                  const char *x_name) {
  for (const Part &p : parts) {
    if (p.value < 0) fail(QKVFUSE_ERROR_INVALID_VALUE, std::string(p.name) + ": must be >= 0; got " + i2s(p.value));
  }
  need_dim(x, x_name);
  const c10::SymInt width = x.sym_size(-1);
  if (total > static_cast<unsigned __int128>(INT64_MAX) || width != static_cast<int64_t>(total)) {
    std::string given;
    for (size_t i = 0; i < N; i++) given += (i ? ", " : "") + std::string(parts[i].name) + " = " + i2s(parts[i].value);
    fail(QKVFUSE_ERROR_SHAPE, given + ": " + formula + " = " + u128(total) + " must equal " + x_name +
                                  "'s row width " + sym_str(width) + " (shape[-1])");
  }
}

// ---- plan cache ------------------------------------------------------------------------

// Plans by every qkvfuse_desc field (the descriptor's bytes, padding zeroed),
// least recently used evicted past CAPACITY; a plan in use stays alive through
// its shared_ptr. Plans are immutable, so one may run on many threads at once.
class PlanCache {
 public:
  using Key = std::array<unsigned char, sizeof(qkvfuse_desc)>;
  using PlanPtr = std::shared_ptr<qkvfuse_plan>;
  static constexpr size_t CAPACITY = 64;

  PlanPtr get(const qkvfuse_desc &desc) {
    Key key;
    std::memcpy(key.data(), &desc, sizeof desc);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = map_.find(key);
      if (it != map_.end()) {
        lru_.splice(lru_.begin(), lru_, it->second);
        return it->second->second;
      }
    }
    qkvfuse_plan *raw = nullptr;
    const qkvfuse_status s = qkvfuse_plan_create(&desc, &raw);
    if (s != QKVFUSE_SUCCESS) fail_library(s, "qkvfuse_plan_create");
    PlanPtr plan(raw, qkvfuse_plan_destroy);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it != map_.end()) return it->second->second;  // made meanwhile by another thread
    lru_.emplace_front(key, plan);
    map_[key] = lru_.begin();
    while (lru_.size() > CAPACITY) {
      map_.erase(lru_.back().first);
      lru_.pop_back();
    }
    return plan;
  }

 private:
  struct Hash {
    size_t operator()(const Key &k) const {
      uint64_t h = 1469598103934665603ull;  // FNV-1a
      for (unsigned char c : k) h = (h ^ c) * 1099511628211ull;
      return static_cast<size_t>(h);
    }
  };
  std::mutex mu_;
  std::list<std::pair<Key, PlanPtr>> lru_;
  std::unordered_map<Key, std::list<std::pair<Key, PlanPtr>>::iterator, Hash> map_;
};

PlanCache &plans() {
  static PlanCache *cache = new PlanCache();  // never destroyed: plans may outlive static destruction order
  return *cache;
}

// ---- the core operator -------------------------------------------------------------------

struct CoreOptions {
  int64_t num_q_heads, num_kv_heads, head_dim, rotary_dim;
  Str rope, rope_style;
  double rope_theta;
  Str rope_scaling_type;
  c10::ArrayRef<double> rope_scaling_params;
  double eps;
  bool gamma_offset;
  Str cache_layout, k_quant, v_quant, rounding, backend;
  int64_t num_threads;
  Str q_quant;
};

struct CoreInputs {
  const OptTensor *qkv, *weight_scale, *act_scale, *bias, *q_gamma, *k_gamma, *q_beta, *k_beta, *positions,
      *cos_sin_cache, *cos, *sin, *slot_mapping, *k_scale, *v_scale, *k_offset, *v_offset, *k_cache, *v_cache, *q,
      *k, *v, *q_scale, *kv_indptr, *kv_indices, *batch_indices, *kv_positions;
};

// The main input of a core call: qkv, else q.
const Tensor &core_main(const CoreInputs &in, const char **name) {
  if (in.qkv->has_value()) {
    *name = "qkv";
    return **in.qkv;
  }
  if (in.q->has_value()) {
    *name = "q";
    return **in.q;
  }
  fail(QKVFUSE_ERROR_NULL_POINTER, "qkv: required (or q and k); got None");
}

qkvfuse_quant_mode quant_for(int given, const OptTensor &cache, const OptTensor &offset) {
  if (given != 0) return static_cast<qkvfuse_quant_mode>(given - 1);
  if (!cache.has_value()) return QKVFUSE_QUANT_NONE;
  switch (cache->scalar_type()) {
    case at::kChar: return offset.has_value() ? QKVFUSE_QUANT_INT8_ASYM : QKVFUSE_QUANT_INT8_SYM;
    case at::kFloat8_e4m3fn: return QKVFUSE_QUANT_FP8_E4M3;
    case at::kFloat8_e5m2: return QKVFUSE_QUANT_FP8_E5M2;
    default: return QKVFUSE_QUANT_NONE;
  }
}

// The options checked and resolved into a descriptor (core.resolve_config); the
// tensors only give facts (which are present, table widths, cache dtypes).
qkvfuse_desc core_desc(const CoreOptions &o, const CoreInputs &in, const Tensor &main) {
  const qkvfuse_rope_scaling scaling = scaling_from_args(o.rope_scaling_type, o.rope_scaling_params);
  int rope = choice(o.rope, "rope", ROPE);
  const int style = choice(o.rope_style, "rope_style", STYLE);
  float_representable(o.eps, "eps");
  int layout = choice(o.cache_layout, "cache_layout", LAYOUT);
  const int kq = choice(o.k_quant, "k_quant", QUANT);
  const int vq = choice(o.v_quant, "v_quant", QUANT);
  const int rounding = choice(o.rounding, "rounding", ROUNDING);
  const int backend = choice(o.backend, "backend", BACKEND);
  int32_range(o.num_threads, "num_threads");
  const int qq = choice(o.q_quant, "q_quant", Q_QUANT);
  // facts, in core.tensor_facts' order
  const int64_t csc_w = in.cos_sin_cache->has_value() ? last_dim(**in.cos_sin_cache, "cos_sin_cache") : -1;
  const int64_t cos_w = in.cos->has_value() ? last_dim(**in.cos, "cos") : -1;
  if (in.k_cache->has_value()) check_handled(**in.k_cache, "k_cache");
  if (in.v_cache->has_value()) check_handled(**in.v_cache, "v_cache");
  if (rope == 0) rope = csc_w >= 0 ? 2 : cos_w >= 0 ? 3 : in.positions->has_value() ? 4 : 1;
  int64_t rd = o.rotary_dim;
  if (rd < 0) {
    rd = rope == 1 ? 0 : rope == 2 ? csc_w : rope == 3 ? cos_w : o.head_dim;
    if (rd < 0) rd = o.head_dim;
  }
  if (layout == 0) layout = in.k_cache->has_value() ? 2 : 1;

  qkvfuse_desc d;
  std::memset(&d, 0, sizeof d);  // the padding too: the bytes are the plan cache's key
  d.struct_size = sizeof d;
  d.version = QKVFUSE_DESC_VERSION;
  d.num_q_heads = o.num_q_heads;
  d.num_kv_heads = o.num_kv_heads;
  d.head_dim = o.head_dim;
  d.rotary_dim = rd;
  d.device_type = main.is_cuda() ? QKVFUSE_DEVICE_CUDA : QKVFUSE_DEVICE_CPU;
  d.device_id = main.is_cuda() ? main.device().index() : 0;
  d.backend = static_cast<qkvfuse_backend>(backend);
  d.num_threads = static_cast<int32_t>(o.num_threads);
  d.q_norm = in.q_gamma->has_value();
  d.k_norm = in.k_gamma->has_value();
  d.eps = static_cast<float>(o.eps);
  d.gamma_offset = o.gamma_offset;
  d.rope_source = static_cast<qkvfuse_rope_source>(rope - 1);
  d.rope_style = static_cast<qkvfuse_rope_style>(style);
  d.rope_theta = o.rope_theta;
  d.rope_scaling = scaling;
  d.cache_layout = static_cast<qkvfuse_cache_layout>(layout - 1);
  d.k_quant = quant_for(kq, *in.k_cache, *in.k_offset);
  d.v_quant = quant_for(vq, *in.v_cache, *in.v_offset);
  d.rounding = static_cast<qkvfuse_rounding>(rounding);
  d.q_quant = static_cast<qkvfuse_quant_mode>(qq == 0 ? QKVFUSE_QUANT_NONE
                                              : qq == 1 ? QKVFUSE_QUANT_FP8_E4M3
                                                        : QKVFUSE_QUANT_FP8_E5M2);
  // page-table addressing when any of its tensors is given (the library names a missing one)
  d.cache_addressing = in.kv_indptr->has_value() || in.kv_indices->has_value() || in.batch_indices->has_value() ||
                               in.kv_positions->has_value()
                           ? QKVFUSE_ADDRESS_PAGE_TABLE
                           : QKVFUSE_ADDRESS_SLOTS;
  return d;
}

// qkvfuse_run with the descriptors of every tensor, on main's device and stream.
void core_call(const qkvfuse_plan *plan, const CoreInputs &in, const Tensor &main, const char *main_name,
               const OptTensor &q_out, const OptTensor &k_out, const OptTensor &v_out, const OptTensor &error_flags) {
  Described<30> d;
  d.add("qkv", *in.qkv);
  d.add("weight_scale", *in.weight_scale);
  d.add("act_scale", *in.act_scale);
  d.add("bias", *in.bias);
  d.add("q_gamma", *in.q_gamma);
  d.add("k_gamma", *in.k_gamma);
  d.add("q_beta", *in.q_beta);
  d.add("k_beta", *in.k_beta);
  d.add("positions", *in.positions);
  d.add("cos_sin_cache", *in.cos_sin_cache);
  d.add("cos", *in.cos);
  d.add("sin", *in.sin);
  d.add("slot_mapping", *in.slot_mapping);
  d.add("k_scale", *in.k_scale);
  d.add("v_scale", *in.v_scale);
  d.add("k_offset", *in.k_offset);
  d.add("v_offset", *in.v_offset);
  d.add("q_out", q_out);
  d.add("k_out", k_out);
  d.add("v_out", v_out);
  d.add("k_cache", *in.k_cache);
  d.add("v_cache", *in.v_cache);
  d.add("q", *in.q);
  d.add("k", *in.k);
  d.add("v", *in.v);
  d.add("q_scale", *in.q_scale);
  d.add("kv_indptr", *in.kv_indptr);
  d.add("kv_indices", *in.kv_indices);
  d.add("batch_indices", *in.batch_indices);
  d.add("kv_positions", *in.kv_positions);
  SameDevice same(main, main_name);
  d.describe_all(same, error_flags);
  uint32_t *flags = flags_pointer(error_flags);
  qkvfuse_args a = QKVFUSE_ARGS_INIT;
  a.qkv = d.get(*in.qkv);
  a.weight_scale = d.get(*in.weight_scale);
  a.act_scale = d.get(*in.act_scale);
  a.bias = d.get(*in.bias);
  a.q_gamma = d.get(*in.q_gamma);
  a.k_gamma = d.get(*in.k_gamma);
  a.q_beta = d.get(*in.q_beta);
  a.k_beta = d.get(*in.k_beta);
  a.positions = d.get(*in.positions);
  a.cos_sin_cache = d.get(*in.cos_sin_cache);
  a.cos = d.get(*in.cos);
  a.sin = d.get(*in.sin);
  a.slot_mapping = d.get(*in.slot_mapping);
  a.k_scale = d.get(*in.k_scale);
  a.v_scale = d.get(*in.v_scale);
  a.k_offset = d.get(*in.k_offset);
  a.v_offset = d.get(*in.v_offset);
  a.q_out = d.get(q_out);
  a.k_out = d.get(k_out);
  a.v_out = d.get(v_out);
  a.k_cache = d.get(*in.k_cache);
  a.v_cache = d.get(*in.v_cache);
  a.error_flags = flags;
  a.q = d.get(*in.q);
  a.k = d.get(*in.k);
  a.v = d.get(*in.v);
  a.q_scale = d.get(*in.q_scale);
  a.kv_indptr = d.get(*in.kv_indptr);
  a.kv_indices = d.get(*in.kv_indices);
  a.batch_indices = d.get(*in.batch_indices);
  a.kv_positions = d.get(*in.kv_positions);
  Launch launch(main);
  const qkvfuse_status s = qkvfuse_run(plan, &a, launch.stream);
  if (s != QKVFUSE_SUCCESS) fail_library(s, "qkvfuse_run");
}

// The dtype of q when the binding allocates it, and of k and v.
at::ScalarType default_out_dtype(const Tensor &main, const CoreInputs &in) {
  if (main.scalar_type() != at::kInt) return main.scalar_type();
  if (in.cos->has_value()) return (*in.cos)->scalar_type();
  if (in.cos_sin_cache->has_value()) return (*in.cos_sin_cache)->scalar_type();
  return at::kFloat;
}

at::ScalarType q_dtype(Str q_quant, at::ScalarType dt) {
  return q_quant == "fp8_e4m3" ? at::kFloat8_e4m3fn : q_quant == "fp8_e5m2" ? at::kFloat8_e5m2 : dt;
}

// Before the binding allocates q (and k, v) from the head counts: they must
// give the main input's row width, as the library will require.
// Whether a separate q is [..., Nq, D] (its last dim split), by the
// library's rule: [T, Nq*D] / [B, S, Nq*D] first (core.heads_split).
bool heads_split(const Tensor &main, const char *main_name, const CoreOptions &o) {
  if (std::strcmp(main_name, "q") != 0) return false;
  const auto s = main.sym_sizes();
  const size_t nd = s.size();
  if (nd >= 2 && nd <= 3 && s[nd - 1] == o.num_q_heads * o.head_dim) return false;
  return nd >= 3 && nd <= 4 && s[nd - 1] == o.head_dim && s[nd - 2] == o.num_q_heads;
}

void check_core_widths(const Tensor &main, const char *main_name, const CoreOptions &o) {
  const int64_t nq = o.num_q_heads, nkv = o.num_kv_heads, hd = o.head_dim;
  if (heads_split(main, main_name, o)) return;
  if (std::strcmp(main_name, "qkv") == 0) {
    unsigned __int128 total = 0;
    if (nq >= 0 && nkv >= 0 && hd >= 0) total = (static_cast<unsigned __int128>(nq) + 2 * static_cast<unsigned __int128>(nkv)) * static_cast<unsigned __int128>(hd);
    output_sizes<3>({{{"num_q_heads", nq}, {"num_kv_heads", nkv}, {"head_dim", hd}}},
                    "(num_q_heads + 2 * num_kv_heads) * head_dim", total, main, "qkv");
  } else {
    unsigned __int128 total = 0;
    if (nq >= 0 && hd >= 0) total = static_cast<unsigned __int128>(nq) * static_cast<unsigned __int128>(hd);
    output_sizes<2>({{{"num_q_heads", nq}, {"head_dim", hd}}}, "num_q_heads * head_dim", total, main, "q");
  }
}

// Outputs the binding allocates: dense tensors on the input's device (whatever
// the input's layout, which the library then refuses with its name)
at::TensorOptions dense_on(const Tensor &x) { return at::TensorOptions().device(x.device()); }

template <typename Sym>
std::vector<Sym> lead_dims(c10::ArrayRef<Sym> sizes) {
  return std::vector<Sym>(sizes.begin(), sizes.end() - (sizes.empty() ? 0 : 1));
}

// q, k, v of the functional core operator: [.., Nq*D] and [.., Nkv*D] (k, v
// empty unless asked for); sizes symbolic under torch.compile's fake tensors.
std::tuple<Tensor, Tensor, Tensor> core_alloc(const Tensor &main, const char *main_name, const CoreOptions &o,
                                             at::ScalarType dt, at::ScalarType qdt, bool return_k, bool return_v) {
  const bool split = heads_split(main, main_name, o);  // outputs [..., N, D] after a q of that form
  auto lead = lead_dims(main.sym_sizes());
  if (split) lead.pop_back();
  auto opts = dense_on(main);
  auto qs = lead;
  auto kvs = lead;
  if (split) {
    qs.emplace_back(o.num_q_heads), qs.emplace_back(o.head_dim);
    kvs.emplace_back(o.num_kv_heads), kvs.emplace_back(o.head_dim);
  } else {
    qs.emplace_back(o.num_q_heads * o.head_dim);
    kvs.emplace_back(o.num_kv_heads * o.head_dim);
  }
  const std::vector<c10::SymInt> empty{c10::SymInt(0)};
  Tensor q = at::empty_symint(qs, opts.dtype(qdt));
  Tensor k = at::empty_symint(return_k ? kvs : empty, opts.dtype(dt));
  Tensor v = at::empty_symint(return_v ? kvs : empty, opts.dtype(dt));
  return {q, k, v};
}

#define QKVFUSE_CORE_OPTIONS                                                                                       \
  CoreOptions o{num_q_heads,    num_kv_heads, head_dim, rotary_dim, rope,    rope_style, rope_theta,               \
                rope_scaling_type, rope_scaling_params, eps, gamma_offset, cache_layout, k_quant, v_quant, rounding, \
                backend,        num_threads,  q_quant}
#define QKVFUSE_CORE_INPUTS                                                                                      \
  CoreInputs in{&qkv,     &weight_scale, &act_scale, &bias,    &q_gamma, &k_gamma, &q_beta,  &k_beta,             \
                &positions, &cos_sin_cache, &cos,     &sin,     &slot_mapping, &k_scale, &v_scale, &k_offset,       \
                &v_offset, &k_cache,      &v_cache,   &q,       &k,       &v,       &q_scale,      &kv_indptr,      \
                &kv_indices, &batch_indices, &kv_positions}

// ---- named operators: shared pieces -------------------------------------------------------

// The library's named entry points take const char * modes: NUL-free, as given.
std::string c_string(Str v, const char *name) {
  no_nul(v, name);
  return std::string(v);
}

std::vector<c10::SymInt> sym_vec(std::initializer_list<c10::SymInt> v) { return std::vector<c10::SymInt>(v); }

}  // namespace

// ---- the core operator: kernels ------------------------------------------------------------

std::tuple<Tensor, Tensor, Tensor> run(
    const OptTensor &qkv, const OptTensor &weight_scale, const OptTensor &act_scale, const OptTensor &bias,
    const OptTensor &q_gamma, const OptTensor &k_gamma, const OptTensor &q_beta, const OptTensor &k_beta,
    const OptTensor &positions, const OptTensor &cos_sin_cache, const OptTensor &cos, const OptTensor &sin,
    const OptTensor &slot_mapping, const OptTensor &k_scale, const OptTensor &v_scale, const OptTensor &k_offset,
    const OptTensor &v_offset, const OptTensor &k_cache, const OptTensor &v_cache, const OptTensor &error_flags,
    int64_t num_q_heads, int64_t num_kv_heads, int64_t head_dim, int64_t rotary_dim, Str rope, Str rope_style,
    double rope_theta, Str rope_scaling_type, c10::ArrayRef<double> rope_scaling_params, double eps,
    bool gamma_offset, Str cache_layout, Str k_quant, Str v_quant, Str rounding, Str backend, int64_t num_threads,
    std::optional<at::ScalarType> out_dtype, bool return_k, bool return_v, const OptTensor &q, const OptTensor &k,
    const OptTensor &v, const OptTensor &q_scale, Str q_quant, const OptTensor &kv_indptr,
    const OptTensor &kv_indices, const OptTensor &batch_indices, const OptTensor &kv_positions) {
  QKVFUSE_CORE_OPTIONS;
  QKVFUSE_CORE_INPUTS;
  const char *main_name = nullptr;
  const Tensor &main = core_main(in, &main_name);
  computing_device(main, main_name);
  const auto plan = plans().get(core_desc(o, in, main));  // a bad configuration first, before any allocation
  check_core_widths(main, main_name, o);
  const at::ScalarType dt = out_dtype.has_value() ? *out_dtype : default_out_dtype(main, in);
  auto out = core_alloc(main, main_name, o, dt, q_dtype(q_quant, dt), return_k, return_v);
  core_call(plan.get(), in, main, main_name, std::get<0>(out),
            return_k ? OptTensor(std::get<1>(out)) : OptTensor(), return_v ? OptTensor(std::get<2>(out)) : OptTensor(),
            error_flags);
  return out;
}

void run_out(const OptTensor &qkv, const OptTensor &weight_scale, const OptTensor &act_scale, const OptTensor &bias,
             const OptTensor &q_gamma, const OptTensor &k_gamma, const OptTensor &q_beta, const OptTensor &k_beta,
             const OptTensor &positions, const OptTensor &cos_sin_cache, const OptTensor &cos, const OptTensor &sin,
             const OptTensor &slot_mapping, const OptTensor &k_scale, const OptTensor &v_scale,
             const OptTensor &k_offset, const OptTensor &v_offset, const Tensor &q_out, const OptTensor &k_out,
             const OptTensor &v_out, const OptTensor &k_cache, const OptTensor &v_cache,
             const OptTensor &error_flags, int64_t num_q_heads, int64_t num_kv_heads, int64_t head_dim,
             int64_t rotary_dim, Str rope, Str rope_style, double rope_theta, Str rope_scaling_type,
             c10::ArrayRef<double> rope_scaling_params, double eps, bool gamma_offset, Str cache_layout, Str k_quant,
             Str v_quant, Str rounding, Str backend, int64_t num_threads, const OptTensor &q, const OptTensor &k,
             const OptTensor &v, const OptTensor &q_scale, Str q_quant, const OptTensor &kv_indptr,
             const OptTensor &kv_indices, const OptTensor &batch_indices, const OptTensor &kv_positions) {
  QKVFUSE_CORE_OPTIONS;
  QKVFUSE_CORE_INPUTS;
  const char *main_name = nullptr;
  const Tensor &main = core_main(in, &main_name);
  computing_device(main, main_name);
  const auto plan = plans().get(core_desc(o, in, main));
  core_call(plan.get(), in, main, main_name, q_out, k_out, v_out, error_flags);
}

namespace {

// Meta kernels: one device for every tensor argument (a meta tensor among real
// ones reaches this kernel, whose outputs would be uninitialized memory), then
// the outputs' shapes.
std::tuple<Tensor, Tensor, Tensor> run_meta(
    const OptTensor &qkv, const OptTensor &weight_scale, const OptTensor &act_scale, const OptTensor &bias,
    const OptTensor &q_gamma, const OptTensor &k_gamma, const OptTensor &q_beta, const OptTensor &k_beta,
    const OptTensor &positions, const OptTensor &cos_sin_cache, const OptTensor &cos, const OptTensor &sin,
    const OptTensor &slot_mapping, const OptTensor &k_scale, const OptTensor &v_scale, const OptTensor &k_offset,
    const OptTensor &v_offset, const OptTensor &k_cache, const OptTensor &v_cache, const OptTensor &error_flags,
    int64_t num_q_heads, int64_t num_kv_heads, int64_t head_dim, int64_t rotary_dim, Str rope, Str rope_style,
    double rope_theta, Str rope_scaling_type, c10::ArrayRef<double> rope_scaling_params, double eps,
    bool gamma_offset, Str cache_layout, Str k_quant, Str v_quant, Str rounding, Str backend, int64_t num_threads,
    std::optional<at::ScalarType> out_dtype, bool return_k, bool return_v, const OptTensor &q, const OptTensor &k,
    const OptTensor &v, const OptTensor &q_scale, Str q_quant, const OptTensor &kv_indptr,
    const OptTensor &kv_indices, const OptTensor &batch_indices, const OptTensor &kv_positions) {
  SameDevice same;
  same("qkv", qkv), same("weight_scale", weight_scale), same("act_scale", act_scale), same("bias", bias);
  same("q_gamma", q_gamma), same("k_gamma", k_gamma), same("q_beta", q_beta), same("k_beta", k_beta);
  same("positions", positions), same("cos_sin_cache", cos_sin_cache), same("cos", cos), same("sin", sin);
  same("slot_mapping", slot_mapping), same("k_scale", k_scale), same("v_scale", v_scale);
  same("k_offset", k_offset), same("v_offset", v_offset), same("k_cache", k_cache), same("v_cache", v_cache);
  same("error_flags", error_flags), same("q", q), same("k", k), same("v", v), same("q_scale", q_scale);
  same("kv_indptr", kv_indptr), same("kv_indices", kv_indices), same("batch_indices", batch_indices);
  same("kv_positions", kv_positions);
  QKVFUSE_CORE_OPTIONS;
  QKVFUSE_CORE_INPUTS;
  const char *main_name = nullptr;
  const Tensor &main = core_main(in, &main_name);
  check_core_widths(main, main_name, o);
  const at::ScalarType dt = out_dtype.has_value() ? *out_dtype : default_out_dtype(main, in);
  return core_alloc(main, main_name, o, dt, q_dtype(q_quant, dt), return_k, return_v);
}

void run_out_meta(const OptTensor &qkv, const OptTensor &weight_scale, const OptTensor &act_scale,
                  const OptTensor &bias, const OptTensor &q_gamma, const OptTensor &k_gamma, const OptTensor &q_beta,
                  const OptTensor &k_beta, const OptTensor &positions, const OptTensor &cos_sin_cache,
                  const OptTensor &cos, const OptTensor &sin, const OptTensor &slot_mapping, const OptTensor &k_scale,
                  const OptTensor &v_scale, const OptTensor &k_offset, const OptTensor &v_offset,
                  const Tensor &q_out, const OptTensor &k_out, const OptTensor &v_out, const OptTensor &k_cache,
                  const OptTensor &v_cache, const OptTensor &error_flags, int64_t, int64_t, int64_t, int64_t, Str,
                  Str, double, Str, c10::ArrayRef<double>, double, bool, Str, Str, Str, Str, Str, int64_t,
                  const OptTensor &q, const OptTensor &k, const OptTensor &v, const OptTensor &q_scale, Str,
                  const OptTensor &kv_indptr, const OptTensor &kv_indices, const OptTensor &batch_indices,
                  const OptTensor &kv_positions) {
  SameDevice same;
  same("qkv", qkv), same("weight_scale", weight_scale), same("act_scale", act_scale), same("bias", bias);
  same("q_gamma", q_gamma), same("k_gamma", k_gamma), same("q_beta", q_beta), same("k_beta", k_beta);
  same("positions", positions), same("cos_sin_cache", cos_sin_cache), same("cos", cos), same("sin", sin);
  same("slot_mapping", slot_mapping), same("k_scale", k_scale), same("v_scale", v_scale);
  same("k_offset", k_offset), same("v_offset", v_offset), same("q_out", q_out), same("k_out", k_out);
  same("v_out", v_out), same("k_cache", k_cache), same("v_cache", v_cache), same("error_flags", error_flags);
  same("q", q), same("k", k), same("v", v), same("q_scale", q_scale);
  same("kv_indptr", kv_indptr), same("kv_indices", kv_indices), same("batch_indices", batch_indices);
  same("kv_positions", kv_positions);
}

}  // namespace

// ---- split_qkv_rmsnorm_rope -----------------------------------------------------------------

namespace {

// The named operators' options (qkvfuse_named_options) from the schema's last two arguments.
qkvfuse_named_options named_options(Str rounding, bool strict) {
  qkvfuse_named_options o = QKVFUSE_NAMED_OPTIONS_INIT;
  o.rounding = static_cast<qkvfuse_rounding>(choice(rounding, "rounding", ROUNDING));
  o.strict = strict ? 1 : 0;
  return o;
}

void check_split_widths(const Tensor &input, int64_t qh, int64_t kvh) {
  unsigned __int128 total = 0;
  if (qh >= 0 && kvh >= 0) total = static_cast<unsigned __int128>(qh) + 2 * static_cast<unsigned __int128>(kvh);
  output_sizes<2>({{{"q_hidden_size", qh}, {"kv_hidden_size", kvh}}}, "q_hidden_size + 2 * kv_hidden_size", total,
                  input, "input");
}

std::tuple<Tensor, Tensor, Tensor> split_alloc(const Tensor &input, int64_t qh, int64_t kvh, at::ScalarType dt) {
  auto lead = lead_dims(input.sym_sizes());
  auto qs = lead, kvs = lead;
  qs.emplace_back(qh);
  kvs.emplace_back(kvh);
  auto opts = dense_on(input).dtype(dt);
  return {at::empty_symint(qs, opts), at::empty_symint(kvs, opts), at::empty_symint(kvs, opts)};
}

void split_call(const Tensor &input, const Tensor &q_weight, const Tensor &k_weight, const Tensor &cos_sin_cache,
                const Tensor &positions, int64_t q_hidden_size, int64_t kv_hidden_size, int64_t head_dim,
                double eps, int64_t rope_dim, const OptTensor &q_bias, const OptTensor &k_bias, bool is_neox,
                const Tensor &q_out, const Tensor &k_out, const Tensor &v_out, const OptTensor &error_flags,
                Str rounding, bool strict) {
  const qkvfuse_named_options options = named_options(rounding, strict);
  Described<10> d;
  d.add("input", input);
  d.add("q_weight", q_weight);
  d.add("k_weight", k_weight);
  d.add("cos_sin_cache", cos_sin_cache);
  d.add("positions", positions);
  d.add("q_bias", q_bias);
  d.add("k_bias", k_bias);
  d.add("q_out", q_out);
  d.add("k_out", k_out);
  d.add("v_out", v_out);
  SameDevice same;
  d.describe_all(same, error_flags);
  uint32_t *flags = flags_pointer(error_flags);
  Launch launch(input);
  const qkvfuse_status s = qkvfuse_split_qkv_rmsnorm_rope_ex(
      d.get(&input), d.get(&q_weight), d.get(&k_weight), q_hidden_size, kv_hidden_size, head_dim, eps,
      d.get(&cos_sin_cache), d.get(&positions), rope_dim, d.get(q_bias), d.get(k_bias), is_neox ? 1 : 0,
      d.get(&q_out), d.get(&k_out), d.get(&v_out), &options, flags, launch.stream);
  if (s != QKVFUSE_SUCCESS) fail_library(s, "split_qkv_rmsnorm_rope");
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> split_qkv_rmsnorm_rope(
    const Tensor &input, const Tensor &q_weight, const Tensor &k_weight, const Tensor &cos_sin_cache,
    const Tensor &positions, int64_t q_hidden_size, int64_t kv_hidden_size, int64_t head_dim, double eps,
    int64_t rope_dim, const OptTensor &q_bias, const OptTensor &k_bias, bool is_neox,
    std::optional<at::ScalarType> out_dtype, const OptTensor &error_flags, Str rounding, bool strict) {
  computing_device(input, "input");
  check_split_widths(input, q_hidden_size, kv_hidden_size);
  auto out = split_alloc(input, q_hidden_size, kv_hidden_size, out_dtype.value_or(input.scalar_type()));
  split_call(input, q_weight, k_weight, cos_sin_cache, positions, q_hidden_size, kv_hidden_size, head_dim, eps,
             rope_dim, q_bias, k_bias, is_neox, std::get<0>(out), std::get<1>(out), std::get<2>(out), error_flags,
             rounding, strict);
  return out;
}

void split_qkv_rmsnorm_rope_out(const Tensor &input, const Tensor &q_weight, const Tensor &k_weight,
                                const Tensor &cos_sin_cache, const Tensor &positions, int64_t q_hidden_size,
                                int64_t kv_hidden_size, int64_t head_dim, double eps, int64_t rope_dim,
                                const OptTensor &q_bias, const OptTensor &k_bias, bool is_neox, const Tensor &q_out,
                                const Tensor &k_out, const Tensor &v_out, const OptTensor &error_flags,
                                Str rounding, bool strict) {
  split_call(input, q_weight, k_weight, cos_sin_cache, positions, q_hidden_size, kv_hidden_size, head_dim, eps,
             rope_dim, q_bias, k_bias, is_neox, q_out, k_out, v_out, error_flags, rounding, strict);
}

namespace {

std::tuple<Tensor, Tensor, Tensor> split_meta(const Tensor &input, const Tensor &q_weight, const Tensor &k_weight,
                                              const Tensor &cos_sin_cache, const Tensor &positions,
                                              int64_t q_hidden_size, int64_t kv_hidden_size, int64_t, double,
                                              int64_t, const OptTensor &q_bias, const OptTensor &k_bias, bool,
                                              std::optional<at::ScalarType> out_dtype,
                                              const OptTensor &error_flags, Str, bool) {
  SameDevice same;
  same("input", input), same("q_weight", q_weight), same("k_weight", k_weight);
  same("cos_sin_cache", cos_sin_cache), same("positions", positions), same("q_bias", q_bias);
  same("k_bias", k_bias), same("error_flags", error_flags);
  check_split_widths(input, q_hidden_size, kv_hidden_size);
  return split_alloc(input, q_hidden_size, kv_hidden_size, out_dtype.value_or(input.scalar_type()));
}

void split_out_meta(const Tensor &input, const Tensor &q_weight, const Tensor &k_weight, const Tensor &cos_sin_cache,
                    const Tensor &positions, int64_t, int64_t, int64_t, double, int64_t, const OptTensor &q_bias,
                    const OptTensor &k_bias, bool, const Tensor &q_out, const Tensor &k_out, const Tensor &v_out,
                    const OptTensor &error_flags, Str, bool) {
  SameDevice same;
  same("input", input), same("q_weight", q_weight), same("k_weight", k_weight);
  same("cos_sin_cache", cos_sin_cache), same("positions", positions), same("q_bias", q_bias);
  same("k_bias", k_bias), same("q_out", q_out), same("k_out", k_out), same("v_out", v_out);
  same("error_flags", error_flags);
}

// ---- qkv_rmsnorm_rope_cache ------------------------------------------------------------------

void check_cache_widths(const Tensor &qkv, c10::IntArrayRef hn, c10::IntArrayRef qs) {
  const int64_t nq = hn[0], nk = hn[1], nv = hn[2], d = qs[3];
  unsigned __int128 total = 0;
  if (nq >= 0 && nk >= 0 && nv >= 0 && d >= 0) {
    total = (static_cast<unsigned __int128>(nq) + static_cast<unsigned __int128>(nk) +
             static_cast<unsigned __int128>(nv)) *
            static_cast<unsigned __int128>(d);
  }
  output_sizes<4>({{{"head_nums[0]", nq}, {"head_nums[1]", nk}, {"head_nums[2]", nv}, {"qkv_size[3]", d}}},
                  "(Nq + Nk + Nv) * D", total, qkv, "qkv");
}

std::tuple<Tensor, Tensor, Tensor, Tensor> cache_alloc(const Tensor &qkv, c10::IntArrayRef hn, c10::IntArrayRef qs,
                                                       bool is_output_qkv) {
  if (qkv.dim() == 0) fail(QKVFUSE_ERROR_SHAPE, "qkv: expected at least 1 dim; got a 0-d tensor");
  const c10::SymInt T = qkv.sym_size(0);
  const int64_t d = qs[3];
  auto opts = dense_on(qkv).dtype(qkv.scalar_type());
  Tensor q = at::empty_symint(sym_vec({T, c10::SymInt(hn[0] * d)}), opts);
  if (!is_output_qkv) {
    const std::vector<c10::SymInt> e{c10::SymInt(0)};
    return {q, at::empty_symint(e, opts), at::empty_symint(e, opts), at::empty_symint(e, opts)};
  }
  return {q, at::empty_symint(sym_vec({T, c10::SymInt(hn[0] * d)}), opts),
          at::empty_symint(sym_vec({T, c10::SymInt(hn[1] * d)}), opts),
          at::empty_symint(sym_vec({T, c10::SymInt(hn[2] * d)}), opts)};
}

void cache_call(const Tensor &qkv, const Tensor &q_gamma, const Tensor &k_gamma, const Tensor &cos, const Tensor &sin,
                const Tensor &index, const Tensor &q_out, const Tensor &k_cache, const Tensor &v_cache,
                const OptTensor &k_scale, const OptTensor &v_scale, const OptTensor &k_offset,
                const OptTensor &v_offset, const OptTensor &q_out_before_quant, const OptTensor &k_out_before_quant,
                const OptTensor &v_out_before_quant, c10::IntArrayRef head_nums, c10::IntArrayRef qkv_size,
                double epsilon, Str cache_mode, bool is_output_qkv, const OptTensor &error_flags, Str rounding,
                bool strict) {
  const qkvfuse_named_options options = named_options(rounding, strict);
  Described<16> d;
  d.add("qkv", qkv);
  d.add("q_gamma", q_gamma);
  d.add("k_gamma", k_gamma);
  d.add("cos", cos);
  d.add("sin", sin);
  d.add("index", index);
  d.add("q_out", q_out);
  d.add("k_cache", k_cache);
  d.add("v_cache", v_cache);
  d.add("k_scale", k_scale);
  d.add("v_scale", v_scale);
  d.add("k_offset", k_offset);
  d.add("v_offset", v_offset);
  d.add("q_out_before_quant", q_out_before_quant);
  d.add("k_out_before_quant", k_out_before_quant);
  d.add("v_out_before_quant", v_out_before_quant);
  SameDevice same;
  d.describe_all(same, error_flags);
  n_integers(qkv_size, "qkv_size", 4);
  n_integers(head_nums, "head_nums", 3);
  const std::string mode = c_string(cache_mode, "cache_mode");
  uint32_t *flags = flags_pointer(error_flags);
  Launch launch(qkv);
  const qkvfuse_status s = qkvfuse_qkv_rmsnorm_rope_cache_ex(
      d.get(&qkv), d.get(&q_gamma), d.get(&k_gamma), d.get(&cos), d.get(&sin), d.get(&index), d.get(&q_out),
      d.get(&k_cache), d.get(&v_cache), d.get(k_scale), d.get(v_scale), d.get(k_offset), d.get(v_offset),
      d.get(q_out_before_quant), d.get(k_out_before_quant), d.get(v_out_before_quant), qkv_size.data(),
      head_nums.data(), epsilon, mode.c_str(), is_output_qkv ? 1 : 0, &options, flags, launch.stream);
  if (s != QKVFUSE_SUCCESS) fail_library(s, "qkv_rmsnorm_rope_cache");
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor, Tensor> qkv_rmsnorm_rope_cache(
    const Tensor &qkv, const Tensor &q_gamma, const Tensor &k_gamma, const Tensor &cos, const Tensor &sin,
    const Tensor &index, const Tensor &k_cache, const Tensor &v_cache, const OptTensor &k_scale,
    const OptTensor &v_scale, const OptTensor &k_offset, const OptTensor &v_offset, c10::IntArrayRef head_nums,
    c10::IntArrayRef qkv_size, double epsilon, Str cache_mode, bool is_output_qkv, const OptTensor &error_flags,
    Str rounding, bool strict) {
  computing_device(qkv, "qkv");
  n_integers(head_nums, "head_nums", 3);
  n_integers(qkv_size, "qkv_size", 4);
  check_cache_widths(qkv, head_nums, qkv_size);
  auto out = cache_alloc(qkv, head_nums, qkv_size, is_output_qkv);
  const OptTensor none;
  cache_call(qkv, q_gamma, k_gamma, cos, sin, index, std::get<0>(out), k_cache, v_cache, k_scale, v_scale, k_offset,
             v_offset, is_output_qkv ? OptTensor(std::get<1>(out)) : none,
             is_output_qkv ? OptTensor(std::get<2>(out)) : none, is_output_qkv ? OptTensor(std::get<3>(out)) : none,
             head_nums, qkv_size, epsilon, cache_mode, is_output_qkv, error_flags, rounding, strict);
  return out;
}

void qkv_rmsnorm_rope_cache_out(const Tensor &qkv, const Tensor &q_gamma, const Tensor &k_gamma, const Tensor &cos,
                                const Tensor &sin, const Tensor &index, const Tensor &q_out, const Tensor &k_cache,
                                const Tensor &v_cache, const OptTensor &k_scale, const OptTensor &v_scale,
                                const OptTensor &k_offset, const OptTensor &v_offset,
                                const OptTensor &q_out_before_quant, const OptTensor &k_out_before_quant,
                                const OptTensor &v_out_before_quant, c10::IntArrayRef head_nums,
                                c10::IntArrayRef qkv_size, double epsilon, Str cache_mode, bool is_output_qkv,
                                const OptTensor &error_flags, Str rounding, bool strict) {
  cache_call(qkv, q_gamma, k_gamma, cos, sin, index, q_out, k_cache, v_cache, k_scale, v_scale, k_offset, v_offset,
             q_out_before_quant, k_out_before_quant, v_out_before_quant, head_nums, qkv_size, epsilon, cache_mode,
             is_output_qkv, error_flags, rounding, strict);
}

namespace {

std::tuple<Tensor, Tensor, Tensor, Tensor> cache_meta(
    const Tensor &qkv, const Tensor &q_gamma, const Tensor &k_gamma, const Tensor &cos, const Tensor &sin,
    const Tensor &index, const Tensor &k_cache, const Tensor &v_cache, const OptTensor &k_scale,
    const OptTensor &v_scale, const OptTensor &k_offset, const OptTensor &v_offset, c10::IntArrayRef head_nums,
    c10::IntArrayRef qkv_size, double, Str, bool is_output_qkv, const OptTensor &error_flags, Str, bool) {
  SameDevice same;
  same("qkv", qkv), same("q_gamma", q_gamma), same("k_gamma", k_gamma), same("cos", cos), same("sin", sin);
  same("index", index), same("k_cache", k_cache), same("v_cache", v_cache), same("k_scale", k_scale);
  same("v_scale", v_scale), same("k_offset", k_offset), same("v_offset", v_offset);
  same("error_flags", error_flags);
  n_integers(head_nums, "head_nums", 3);
  n_integers(qkv_size, "qkv_size", 4);
  check_cache_widths(qkv, head_nums, qkv_size);
  return cache_alloc(qkv, head_nums, qkv_size, is_output_qkv);
}

void cache_out_meta(const Tensor &qkv, const Tensor &q_gamma, const Tensor &k_gamma, const Tensor &cos,
                    const Tensor &sin, const Tensor &index, const Tensor &q_out, const Tensor &k_cache,
                    const Tensor &v_cache, const OptTensor &k_scale, const OptTensor &v_scale,
                    const OptTensor &k_offset, const OptTensor &v_offset, const OptTensor &q_out_before_quant,
                    const OptTensor &k_out_before_quant, const OptTensor &v_out_before_quant, c10::IntArrayRef,
                    c10::IntArrayRef, double, Str, bool, const OptTensor &error_flags, Str, bool) {
  SameDevice same;
  same("qkv", qkv), same("q_gamma", q_gamma), same("k_gamma", k_gamma), same("cos", cos), same("sin", sin);
  same("index", index), same("q_out", q_out), same("k_cache", k_cache), same("v_cache", v_cache);
  same("k_scale", k_scale), same("v_scale", v_scale), same("k_offset", k_offset), same("v_offset", v_offset);
  same("q_out_before_quant", q_out_before_quant), same("k_out_before_quant", k_out_before_quant);
  same("v_out_before_quant", v_out_before_quant), same("error_flags", error_flags);
}

// ---- dequant_rope_quant_kvcache ---------------------------------------------------------------

// named.dequant_out_shapes: q [.., size_splits[0] / D, D] and k, v [.., size_splits[1] / D, D]
std::pair<std::vector<c10::SymInt>, std::vector<c10::SymInt>> dequant_shapes(const Tensor &x, const Tensor &k_cache,
                                                                           c10::IntArrayRef ss) {
  if (k_cache.dim() != 4 || k_cache.sym_size(3) < 1) {
    fail(QKVFUSE_ERROR_SHAPE, "k_cache: expected [C1, C2, Nkv, D] with D >= 1 (D is read from it); got shape " +
                                  sym_tuple(k_cache.sym_sizes()));
  }
  const c10::SymInt d = k_cache.sym_size(3);
  unsigned __int128 total = 0;
  if (ss[0] >= 0 && ss[1] >= 0 && ss[2] >= 0) {
    total = static_cast<unsigned __int128>(ss[0]) + static_cast<unsigned __int128>(ss[1]) +
            static_cast<unsigned __int128>(ss[2]);
  }
  output_sizes<3>({{{"size_splits[0]", ss[0]}, {"size_splits[1]", ss[1]}, {"size_splits[2]", ss[2]}}},
                  "size_splits[0] + size_splits[1] + size_splits[2]", total, x, "x");
  auto lead = lead_dims(x.sym_sizes());
  auto qs = lead, kvs = lead;
  qs.emplace_back(c10::SymInt(ss[0]) / d);
  qs.emplace_back(d);
  kvs.emplace_back(c10::SymInt(ss[1]) / d);
  kvs.emplace_back(d);
  return {qs, kvs};
}

std::tuple<Tensor, Tensor, Tensor> dequant_alloc(const Tensor &x, const Tensor &k_cache, c10::IntArrayRef ss,
                                                 at::ScalarType dt, bool kv_output) {
  auto shapes = dequant_shapes(x, k_cache, ss);
  auto opts = dense_on(x).dtype(dt);
  if (!kv_output) shapes.second[0] = c10::SymInt(0); // the seed's empty kOut, vOut: the first dim 0
  return {at::empty_symint(shapes.first, opts), at::empty_symint(shapes.second, opts),
          at::empty_symint(shapes.second, opts)};
}

void dequant_call(const Tensor &x, const Tensor &cos, const Tensor &sin, const Tensor &k_cache, const Tensor &v_cache,
                  const Tensor &indices, const Tensor &scale_k, const Tensor &scale_v, const OptTensor &offset_k,
                  const OptTensor &offset_v, const OptTensor &weight_scale, const OptTensor &activation_scale,
                  const OptTensor &bias, c10::IntArrayRef size_splits, Str quant_mode, Str layout, bool kv_output,
                  Str cache_mode, const Tensor &q_out, const OptTensor &k_out, const OptTensor &v_out,
                  const OptTensor &error_flags, Str rounding, bool strict) {
  const qkvfuse_named_options options = named_options(rounding, strict);
  // ignored, neither described nor checked, as the library ignores them: the scales with float x
  // (the seed: no effect) and the k/v outputs without kv_output
  const OptTensor none;
  const bool dequant = x.scalar_type() == at::kInt;
  Described<16> d;
  d.add("x", x);
  d.add("cos", cos);
  d.add("sin", sin);
  d.add("k_cache", k_cache);
  d.add("v_cache", v_cache);
  d.add("indices", indices);
  d.add("scale_k", scale_k);
  d.add("scale_v", scale_v);
  d.add("offset_k", offset_k);
  d.add("offset_v", offset_v);
  d.add("weight_scale", dequant ? weight_scale : none);
  d.add("activation_scale", dequant ? activation_scale : none);
  d.add("bias", dequant ? bias : none);
  d.add("q_out", q_out);
  d.add("k_out", kv_output ? k_out : none);
  d.add("v_out", kv_output ? v_out : none);
  SameDevice same;
  d.describe_all(same, error_flags);
  n_integers(size_splits, "size_splits", 3);
  const std::string qm = c_string(quant_mode, "quant_mode");
  const std::string lo = c_string(layout, "layout");
  const std::string cm = c_string(cache_mode, "cache_mode");
  uint32_t *flags = flags_pointer(error_flags);
  Launch launch(x);
  const qkvfuse_status s = qkvfuse_dequant_rope_quant_kvcache_ex(
      d.get(&x), d.get(&cos), d.get(&sin), d.get(&k_cache), d.get(&v_cache), d.get(&indices), d.get(&scale_k),
      d.get(&scale_v), d.get(offset_k), d.get(offset_v), d.get(dequant ? weight_scale : none),
      d.get(dequant ? activation_scale : none), d.get(dequant ? bias : none), size_splits.data(), qm.c_str(),
      lo.c_str(), kv_output ? 1 : 0, cm.c_str(), d.get(&q_out), d.get(kv_output ? k_out : none),
      d.get(kv_output ? v_out : none), &options, flags, launch.stream);
  if (s != QKVFUSE_SUCCESS) fail_library(s, "dequant_rope_quant_kvcache");
}

at::ScalarType dequant_dtype(const Tensor &x, const Tensor &cos, std::optional<at::ScalarType> out_dtype) {
  if (out_dtype.has_value()) return *out_dtype;
  return x.scalar_type() == at::kInt ? cos.scalar_type() : x.scalar_type();
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> dequant_rope_quant_kvcache(
    const Tensor &x, const Tensor &cos, const Tensor &sin, const Tensor &k_cache, const Tensor &v_cache,
    const Tensor &indices, const Tensor &scale_k, const Tensor &scale_v, const OptTensor &offset_k,
    const OptTensor &offset_v, const OptTensor &weight_scale, const OptTensor &activation_scale, const OptTensor &bias,
    c10::IntArrayRef size_splits, Str quant_mode, Str layout, bool kv_output, Str cache_mode,
    std::optional<at::ScalarType> out_dtype, const OptTensor &error_flags, Str rounding, bool strict) {
  computing_device(x, "x");
  n_integers(size_splits, "size_splits", 3);
  auto out = dequant_alloc(x, k_cache, size_splits, dequant_dtype(x, cos, out_dtype), kv_output);
  const OptTensor none;
  dequant_call(x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v, offset_k, offset_v, weight_scale,
               activation_scale, bias, size_splits, quant_mode, layout, kv_output, cache_mode, std::get<0>(out),
               kv_output ? OptTensor(std::get<1>(out)) : none, kv_output ? OptTensor(std::get<2>(out)) : none,
               error_flags, rounding, strict);
  return out;
}

void dequant_rope_quant_kvcache_out(const Tensor &x, const Tensor &cos, const Tensor &sin, const Tensor &k_cache,
                                    const Tensor &v_cache, const Tensor &indices, const Tensor &scale_k,
                                    const Tensor &scale_v, const OptTensor &offset_k, const OptTensor &offset_v,
                                    const OptTensor &weight_scale, const OptTensor &activation_scale,
                                    const OptTensor &bias, c10::IntArrayRef size_splits, Str quant_mode, Str layout,
                                    bool kv_output, Str cache_mode, const Tensor &q_out, const OptTensor &k_out,
                                    const OptTensor &v_out, const OptTensor &error_flags, Str rounding,
                                    bool strict) {
  dequant_call(x, cos, sin, k_cache, v_cache, indices, scale_k, scale_v, offset_k, offset_v, weight_scale,
               activation_scale, bias, size_splits, quant_mode, layout, kv_output, cache_mode, q_out, k_out, v_out,
               error_flags, rounding, strict);
}

namespace {

std::tuple<Tensor, Tensor, Tensor> dequant_meta(
    const Tensor &x, const Tensor &cos, const Tensor &sin, const Tensor &k_cache, const Tensor &v_cache,
    const Tensor &indices, const Tensor &scale_k, const Tensor &scale_v, const OptTensor &offset_k,
    const OptTensor &offset_v, const OptTensor &weight_scale, const OptTensor &activation_scale, const OptTensor &bias,
    c10::IntArrayRef size_splits, Str, Str, bool kv_output, Str, std::optional<at::ScalarType> out_dtype,
    const OptTensor &error_flags, Str, bool) {
  SameDevice same;
  same("x", x), same("cos", cos), same("sin", sin), same("k_cache", k_cache), same("v_cache", v_cache);
  same("indices", indices), same("scale_k", scale_k), same("scale_v", scale_v), same("offset_k", offset_k);
  same("offset_v", offset_v), same("weight_scale", weight_scale), same("activation_scale", activation_scale);
  same("bias", bias), same("error_flags", error_flags);
  n_integers(size_splits, "size_splits", 3);
  return dequant_alloc(x, k_cache, size_splits, dequant_dtype(x, cos, out_dtype), kv_output);
}

void dequant_out_meta(const Tensor &x, const Tensor &cos, const Tensor &sin, const Tensor &k_cache,
                      const Tensor &v_cache, const Tensor &indices, const Tensor &scale_k, const Tensor &scale_v,
                      const OptTensor &offset_k, const OptTensor &offset_v, const OptTensor &weight_scale,
                      const OptTensor &activation_scale, const OptTensor &bias, c10::IntArrayRef, Str, Str, bool, Str,
                      const Tensor &q_out, const OptTensor &k_out, const OptTensor &v_out,
                      const OptTensor &error_flags, Str, bool) {
  SameDevice same;
  same("x", x), same("cos", cos), same("sin", sin), same("k_cache", k_cache), same("v_cache", v_cache);
  same("indices", indices), same("scale_k", scale_k), same("scale_v", scale_v), same("offset_k", offset_k);
  same("offset_v", offset_v), same("weight_scale", weight_scale), same("activation_scale", activation_scale);
  same("bias", bias), same("q_out", q_out), same("k_out", k_out), same("v_out", v_out);
  same("error_flags", error_flags);
}

// ---- build_cos_sin_cache ------------------------------------------------------------------------

// rope.table_size: max_position >= 0, and rotary_dim, theta and the rule as the
// library judges them
void table_size(int64_t max_position, int64_t rotary_dim, double theta, const qkvfuse_rope_scaling &rule) {
  if (max_position < 0) {
    fail(QKVFUSE_ERROR_INVALID_VALUE, "max_position: must be >= 0 (rows of the table); got " + i2s(max_position));
  }
  double inv_freq[512];  // rotary_dim / 2 values; the library refuses rotary_dim > 1024 before writing
  double mscale = 0.0;
  const qkvfuse_status s = qkvfuse_rope_inv_freq(theta, &rule, rotary_dim, inv_freq, &mscale);
  if (s != QKVFUSE_SUCCESS) fail_library(s, "rope_inv_freq");
}

// One kernel for every device (the operator has no tensor argument): the table
// is built on the CPU and moved; on the meta device only its shape is made.
Tensor build_cos_sin_cache(int64_t max_position, int64_t rotary_dim, double theta, Str scaling_type,
                           c10::ArrayRef<double> scaling_params, at::ScalarType dtype, at::Device device) {
  const qkvfuse_rope_scaling rule = scaling_from_args(scaling_type, scaling_params);
  table_size(max_position, rotary_dim, theta, rule);
  if (device.is_meta()) return at::empty({max_position, rotary_dim}, at::TensorOptions().dtype(dtype).device(device));
  Tensor out;
  try {
    out = at::empty({max_position, rotary_dim}, at::TensorOptions().dtype(dtype));
  } catch (const c10::Error &e) {  // the allocator's refusal
    fail(QKVFUSE_ERROR_OUT_OF_MEMORY, "cos_sin_cache: cannot allocate [" + i2s(max_position) + ", " +
                                          i2s(rotary_dim) + "] torch." + dtype_name(dtype) + ": " +
                                          e.what_without_backtrace());
  }
  qkvfuse_tensor t{};
  describe(out, "cos_sin_cache", &t);
  const qkvfuse_status s = qkvfuse_build_cos_sin_cache(theta, &rule, &t);
  if (s != QKVFUSE_SUCCESS) fail_library(s, "build_cos_sin_cache");
  return out.to(device);
}

}  // namespace

}  // namespace qkvfuse_ext

// ---- registration ----------------------------------------------------------------------------

// The schemas: python/qkvfuse/torch_ops.py defines the same strings for the
// Python registration (test_bindings.py compares them).
#define QKVFUSE_CORE_TENSORS                                                                                        \
  "Tensor? qkv, Tensor? weight_scale, Tensor? act_scale, Tensor? bias, Tensor? q_gamma, Tensor? k_gamma, "        \
  "Tensor? q_beta, Tensor? k_beta, Tensor? positions, Tensor? cos_sin_cache, Tensor? cos, Tensor? sin, "            \
  "Tensor? slot_mapping, Tensor? k_scale, Tensor? v_scale, Tensor? k_offset, Tensor? v_offset"
#define QKVFUSE_CORE_OPTIONS_SCHEMA                                                                                 \
  "int num_q_heads, int num_kv_heads, int head_dim, int rotary_dim, str rope, str rope_style, float rope_theta, "   \
  "str rope_scaling_type, float[] rope_scaling_params, float eps, bool gamma_offset, str cache_layout, "            \
  "str k_quant, str v_quant, str rounding, str backend, int num_threads"
#define QKVFUSE_CORE_V2                                                                                        \
  "Tensor? q=None, Tensor? k=None, Tensor? v=None, Tensor? q_scale=None, str q_quant=\"none\", "                  \
  "Tensor? kv_indptr=None, Tensor? kv_indices=None, Tensor? batch_indices=None, Tensor? kv_positions=None"

// The named operators' options, last and with defaults (calls without them keep working).
#define QKVFUSE_NAMED_OPTIONS ", str rounding=\"fused\", bool strict=False"

TORCH_LIBRARY(qkvfuse, m) {
  m.def("run(" QKVFUSE_CORE_TENSORS ", Tensor(a!)? k_cache, Tensor(b!)? v_cache, Tensor(c!)? error_flags, "
        QKVFUSE_CORE_OPTIONS_SCHEMA ", ScalarType? out_dtype, bool return_k, bool return_v, " QKVFUSE_CORE_V2
        ") -> (Tensor, Tensor, Tensor)");
  m.def("run_out(" QKVFUSE_CORE_TENSORS ", Tensor(a!) q_out, Tensor(b!)? k_out, Tensor(c!)? v_out, "
        "Tensor(d!)? k_cache, Tensor(e!)? v_cache, Tensor(f!)? error_flags, " QKVFUSE_CORE_OPTIONS_SCHEMA
        ", " QKVFUSE_CORE_V2 ") -> ()");
  m.def("split_qkv_rmsnorm_rope(Tensor input, Tensor q_weight, Tensor k_weight, Tensor cos_sin_cache, "
        "Tensor positions, int q_hidden_size, int kv_hidden_size, int head_dim, float eps, int rope_dim, "
        "Tensor? q_bias, Tensor? k_bias, bool is_neox, ScalarType? out_dtype, Tensor(a!)? error_flags"
        QKVFUSE_NAMED_OPTIONS ") -> (Tensor, Tensor, Tensor)");
  m.def("split_qkv_rmsnorm_rope_out(Tensor input, Tensor q_weight, Tensor k_weight, Tensor cos_sin_cache, "
        "Tensor positions, int q_hidden_size, int kv_hidden_size, int head_dim, float eps, int rope_dim, "
        "Tensor? q_bias, Tensor? k_bias, bool is_neox, Tensor(a!) q_out, Tensor(b!) k_out, Tensor(c!) v_out, "
        "Tensor(d!)? error_flags" QKVFUSE_NAMED_OPTIONS ") -> ()");
  m.def("qkv_rmsnorm_rope_cache(Tensor qkv, Tensor q_gamma, Tensor k_gamma, Tensor cos, Tensor sin, "
        "Tensor index, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor? k_scale, Tensor? v_scale, "
        "Tensor? k_offset, Tensor? v_offset, int[] head_nums, int[] qkv_size, float epsilon, str cache_mode, "
        "bool is_output_qkv, Tensor(c!)? error_flags" QKVFUSE_NAMED_OPTIONS
        ") -> (Tensor, Tensor, Tensor, Tensor)");
  m.def("qkv_rmsnorm_rope_cache_out(Tensor qkv, Tensor q_gamma, Tensor k_gamma, Tensor cos, Tensor sin, "
        "Tensor index, Tensor(a!) q_out, Tensor(b!) k_cache, Tensor(c!) v_cache, Tensor? k_scale, "
        "Tensor? v_scale, Tensor? k_offset, Tensor? v_offset, Tensor(d!)? q_out_before_quant, "
        "Tensor(e!)? k_out_before_quant, Tensor(f!)? v_out_before_quant, int[] head_nums, int[] qkv_size, "
        "float epsilon, str cache_mode, bool is_output_qkv, Tensor(g!)? error_flags" QKVFUSE_NAMED_OPTIONS
        ") -> ()");
  m.def("dequant_rope_quant_kvcache(Tensor x, Tensor cos, Tensor sin, Tensor(a!) k_cache, Tensor(b!) v_cache, "
        "Tensor indices, Tensor scale_k, Tensor scale_v, Tensor? offset_k, Tensor? offset_v, "
        "Tensor? weight_scale, Tensor? activation_scale, Tensor? bias, int[] size_splits, str quant_mode, "
        "str layout, bool kv_output, str cache_mode, ScalarType? out_dtype, Tensor(c!)? error_flags"
        QKVFUSE_NAMED_OPTIONS ") -> (Tensor, Tensor, Tensor)");
  m.def("dequant_rope_quant_kvcache_out(Tensor x, Tensor cos, Tensor sin, Tensor(a!) k_cache, "
        "Tensor(b!) v_cache, Tensor indices, Tensor scale_k, Tensor scale_v, Tensor? offset_k, Tensor? offset_v, "
        "Tensor? weight_scale, Tensor? activation_scale, Tensor? bias, int[] size_splits, str quant_mode, "
        "str layout, bool kv_output, str cache_mode, Tensor(c!) q_out, Tensor(d!)? k_out, Tensor(e!)? v_out, "
        "Tensor(f!)? error_flags" QKVFUSE_NAMED_OPTIONS ") -> ()");
  m.def("build_cos_sin_cache(int max_position, int rotary_dim, float theta, str scaling_type, "
        "float[] scaling_params, ScalarType dtype, Device device) -> Tensor");
}

TORCH_LIBRARY_IMPL(qkvfuse, CPU, m) {
  QKVFUSE_TORCH_KERNELS(m);
}

TORCH_LIBRARY_IMPL(qkvfuse, Meta, m) {
  m.impl("run", TORCH_FN(qkvfuse_ext::run_meta));
  m.impl("run_out", TORCH_FN(qkvfuse_ext::run_out_meta));
  m.impl("split_qkv_rmsnorm_rope", TORCH_FN(qkvfuse_ext::split_meta));
  m.impl("split_qkv_rmsnorm_rope_out", TORCH_FN(qkvfuse_ext::split_out_meta));
  m.impl("qkv_rmsnorm_rope_cache", TORCH_FN(qkvfuse_ext::cache_meta));
  m.impl("qkv_rmsnorm_rope_cache_out", TORCH_FN(qkvfuse_ext::cache_out_meta));
  m.impl("dequant_rope_quant_kvcache", TORCH_FN(qkvfuse_ext::dequant_meta));
  m.impl("dequant_rope_quant_kvcache_out", TORCH_FN(qkvfuse_ext::dequant_out_meta));
}

// Every other backend (sparse layouts, other devices, CUDA in a build without
// the CUDA part): the same kernels, which name the tensor they cannot take.
TORCH_LIBRARY_IMPL(qkvfuse, CompositeExplicitAutograd, m) {
  QKVFUSE_TORCH_KERNELS(m);
  m.impl("build_cos_sin_cache", TORCH_FN(qkvfuse_ext::build_cos_sin_cache));
}
