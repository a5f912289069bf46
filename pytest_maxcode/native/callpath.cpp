// The compiled call path of the native ABI (DESIGN.md section 4): allocate the outputs,
// describe every tensor as a DLTensor and call maxcode_run, in one C call from Python.
//
// It does what abi.py's ctypes path does (struct packing, ctypes) at a fraction of the
// cost: the descriptors live on the stack, outputs come from at::empty, and the Python
// side makes one METH_FASTCALL call. Built once per torch version by trusted code
// (native/callpath.py) and loaded from a sealed copy of its verified bytes; candidates
// never build or choose it.
#include <Python.h>

#include <ATen/autocast_mode.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/scalar_tensor.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace {

// DLPack's descriptor, laid out as dlpack.h and abi.py's DLTensor have it.
struct DLDevice { int32_t device_type; int32_t device_id; };
struct DLDataType { uint8_t code; uint8_t bits; uint16_t lanes; };
struct DLTensor {
  void* data; DLDevice device; int32_t ndim; DLDataType dtype;
  int64_t* shape; int64_t* strides; uint64_t byte_offset;
};
static_assert(sizeof(DLTensor) == 48, "DLTensor must match DLPack's layout");

using RunFn = int (*)(const DLTensor*, int32_t, DLTensor*, int32_t, void*);

PyObject* abi_error = PyExc_TypeError;  // abi.py's AbiError, once it is set

bool dl_dtype(at::ScalarType t, DLDataType* out) {
  uint8_t code, bits;
  switch (t) {
    case at::kHalf: code = 2; bits = 16; break;
    case at::kFloat: code = 2; bits = 32; break;
    case at::kDouble: code = 2; bits = 64; break;
    case at::kBFloat16: code = 4; bits = 16; break;
    case at::kChar: code = 0; bits = 8; break;
    case at::kShort: code = 0; bits = 16; break;
    case at::kInt: code = 0; bits = 32; break;
    case at::kLong: code = 0; bits = 64; break;
    case at::kByte: code = 1; bits = 8; break;
    case at::kUInt16: code = 1; bits = 16; break;
    case at::kUInt32: code = 1; bits = 32; break;
    case at::kUInt64: code = 1; bits = 64; break;
    case at::kBool: code = 6; bits = 8; break;
    case at::kComplexFloat: code = 5; bits = 64; break;
    case at::kComplexDouble: code = 5; bits = 128; break;
    default: return false;
  }
  *out = DLDataType{code, bits, 1};
  return true;
}

// Descriptors for up to a few tensors without touching the heap.
struct Descriptors {
  c10::SmallVector<DLTensor, 8> tensors;
  c10::SmallVector<int64_t, 64> dims;   // every tensor's shape then strides
  c10::SmallVector<at::Tensor, 4> keep; // 0-d tensors made from Python scalars

  // False (a Python error set) when ``t`` cannot be described.
  bool add(const at::Tensor& t, size_t index) {
    DLTensor d{};
    if (!dl_dtype(t.scalar_type(), &d.dtype)) {
      PyErr_Format(abi_error, "dtype %s has no DLPack code that maxcode_run accepts",
                   (std::string("torch.") + c10::toString(t.scalar_type())).c_str());
      return false;
    }
    auto dev = t.device();
    if (dev.is_cuda()) {
      d.device = DLDevice{2, dev.index()};
    } else if (dev.is_cpu()) {
      d.device = DLDevice{1, 0};
    } else {
      PyErr_Format(abi_error, "tensor %zu is on %s; maxcode_run takes cpu or cuda tensors", index, dev.str().c_str());
      return false;
    }
    d.data = t.data_ptr();
    d.ndim = static_cast<int32_t>(t.dim());
    tensors.push_back(d);
    auto sizes = t.sizes();
    auto strides = t.strides();
    dims.append(sizes.begin(), sizes.end());
    dims.append(strides.begin(), strides.end());
    return true;
  }

  // Shape and stride pointers, once ``dims`` no longer moves.
  DLTensor* finish() {
    int64_t* at_dims = dims.data();
    for (auto& d : tensors) {
      if (d.ndim) {
        d.shape = at_dims;
        d.strides = at_dims + d.ndim;
        at_dims += 2 * d.ndim;
      }
    }
    return tensors.data();
  }
};

// Arguments as abi.as_abi_tensors maps them: tensors, or int/float/bool as 0-d tensors.
bool add_values(Descriptors& desc, PyObject* seq, size_t& index, const at::Device& device) {
  PyObject* fast = PySequence_Fast(seq, "the arguments must be a sequence");
  if (!fast) return false;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  PyObject** items = PySequence_Fast_ITEMS(fast);
  bool ok = true;
  for (Py_ssize_t i = 0; ok && i < n; ++i, ++index) {
    PyObject* v = items[i];
    if (THPVariable_Check(v)) {
      ok = desc.add(THPVariable_Unpack(v), index);
      continue;
    }
    at::Tensor t;
    auto opts = at::TensorOptions().device(device);
    if (PyBool_Check(v)) {
      t = at::scalar_tensor(v == Py_True, opts.dtype(at::kBool));
    } else if (PyLong_Check(v)) {
      long long x = PyLong_AsLongLong(v);
      if (x == -1 && PyErr_Occurred()) { ok = false; break; }
      t = at::scalar_tensor(static_cast<int64_t>(x), opts.dtype(at::kLong));
    } else if (PyFloat_Check(v)) {
      t = at::scalar_tensor(PyFloat_AS_DOUBLE(v), opts.dtype(at::kDouble));
    } else {
      PyErr_Format(abi_error,
                   "argument %zu is a %s; the native ABI carries tensors and int/float/bool scalars only "
                   "(use a compat candidate for other arguments)", index, Py_TYPE(v)->tp_name);
      ok = false;
      break;
    }
    desc.keep.push_back(t);
    ok = desc.add(t, index);
  }
  Py_DECREF(fast);
  return ok;
}

bool parse_device(PyObject* obj, at::Device* out) {
  if (obj == Py_None) {
    *out = at::Device(at::kCPU);
  } else if (THPDevice_Check(obj)) {
    *out = reinterpret_cast<THPDevice*>(obj)->device;
  } else if (PyUnicode_Check(obj)) {
    const char* s = PyUnicode_AsUTF8(obj);
    if (!s) return false;
    *out = at::Device(std::string(s));
  } else {
    PyErr_SetString(PyExc_TypeError, "device must be a torch.device, a string or None");
    return false;
  }
  return true;
}

// Allocate one tensor per (shape, dtype) in ``meta``.
bool allocate(PyObject* meta, const at::Device& device, c10::SmallVector<at::Tensor, 4>& outs) {
  PyObject* fast = PySequence_Fast(meta, "the output metadata must be a sequence of (shape, dtype)");
  if (!fast) return false;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  PyObject** items = PySequence_Fast_ITEMS(fast);
  bool ok = true;
  for (Py_ssize_t i = 0; ok && i < n; ++i) {
    PyObject* pair = items[i];
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 || !THPDtype_Check(PyTuple_GET_ITEM(pair, 1))) {
      PyErr_SetString(PyExc_TypeError, "each output is a (shape, torch.dtype) tuple");
      ok = false;
      break;
    }
    PyObject* shape = PySequence_Fast(PyTuple_GET_ITEM(pair, 0), "an output shape must be a sequence");
    if (!shape) { ok = false; break; }
    c10::SmallVector<int64_t, 8> dims;
    Py_ssize_t nd = PySequence_Fast_GET_SIZE(shape);
    for (Py_ssize_t k = 0; k < nd; ++k) {
      long long x = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(shape, k));
      if (x == -1 && PyErr_Occurred()) { ok = false; break; }
      dims.push_back(x);
    }
    Py_DECREF(shape);
    if (!ok) break;
    auto dtype = reinterpret_cast<THPDtype*>(PyTuple_GET_ITEM(pair, 1))->scalar_type;
    outs.push_back(at::empty(dims, at::TensorOptions().dtype(dtype).device(device)));
  }
  Py_DECREF(fast);
  return ok;
}

void* as_pointer(PyObject* obj) {
  if (obj == Py_None) return nullptr;
  return PyLong_AsVoidPtr(obj);
}

// The call itself, without the GIL (as ctypes releases it): a long kernel does not stop other threads.
int call(void* fn, Descriptors& in, Descriptors& out, void* stream) {
  DLTensor* ins = in.finish();
  DLTensor* outs = out.finish();
  int32_t n_in = static_cast<int32_t>(in.tensors.size());
  int32_t n_out = static_cast<int32_t>(out.tensors.size());
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = reinterpret_cast<RunFn>(fn)(ins, n_in, outs, n_out, stream);
  Py_END_ALLOW_THREADS
  return rc;
}

// run(fn, args, extras, out_meta, device, stream) -> list of outputs, or the kernel's non-zero int
PyObject* run(PyObject*, PyObject* const* a, Py_ssize_t n) {
  if (n != 6) {
    PyErr_SetString(PyExc_TypeError, "run(fn, args, extras, out_meta, device, stream)");
    return nullptr;
  }
  try {
    void* fn = as_pointer(a[0]);
    void* stream = as_pointer(a[5]);
    if (PyErr_Occurred()) return nullptr;
    at::Device device(at::kCPU);
    if (!parse_device(a[4], &device)) return nullptr;
    Descriptors in, out;
    size_t index = 0;
    if (!add_values(in, a[1], index, device) || !add_values(in, a[2], index, device)) return nullptr;
    c10::SmallVector<at::Tensor, 4> outs;
    if (!allocate(a[3], device, outs)) return nullptr;
    for (size_t i = 0; i < outs.size(); ++i) {
      if (!out.add(outs[i], i)) return nullptr;
    }
    int rc = call(fn, in, out, stream);
    if (rc != 0) return PyLong_FromLong(rc);
    PyObject* list = PyList_New(static_cast<Py_ssize_t>(outs.size()));
    if (!list) return nullptr;
    for (size_t i = 0; i < outs.size(); ++i) {
      PyObject* t = THPVariable_Wrap(std::move(outs[i]));
      if (!t) { Py_DECREF(list); return nullptr; }
      PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), t);
    }
    return list;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

// run_into(fn, args, extras, outs, alloc_meta, device, stream) -> the kernel's int
// Writes into ``outs``; ``alloc_meta`` (or None) is allocated and dropped first, so a call
// that writes into given buffers pays what the dispatcher's allocation costs.
PyObject* run_into(PyObject*, PyObject* const* a, Py_ssize_t n) {
  if (n != 7) {
    PyErr_SetString(PyExc_TypeError, "run_into(fn, args, extras, outs, alloc_meta, device, stream)");
    return nullptr;
  }
  try {
    void* fn = as_pointer(a[0]);
    void* stream = as_pointer(a[6]);
    if (PyErr_Occurred()) return nullptr;
    at::Device device(at::kCPU);
    if (!parse_device(a[5], &device)) return nullptr;
    if (a[4] != Py_None) {
      c10::SmallVector<at::Tensor, 4> dropped;
      if (!allocate(a[4], device, dropped)) return nullptr;
    }
    Descriptors in, out;
    size_t index = 0;
    if (!add_values(in, a[1], index, device) || !add_values(in, a[2], index, device)) return nullptr;
    size_t out_index = 0;
    if (!add_values(out, a[3], out_index, device)) return nullptr;
    return PyLong_FromLong(call(fn, in, out, stream));
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

// What a dense CPU tensor's dispatch keys may hold (autograd's and autocast's keys only) for
// its memory to be what the reference reads: a conjugate or negative view, a zero tensor, a
// sparse or mkldnn layout, a functorch wrapper (vmap, grad, jvp) or a __torch_dispatch__
// subclass (FakeTensor) adds a key, and the kernel would read raw memory the reference does not.
const c10::DispatchKeySet kPlainCpu({c10::DispatchKey::CPU, c10::DispatchKey::ADInplaceOrView,
                                     c10::DispatchKey::AutogradCPU, c10::DispatchKey::AutocastCPU});

// The alignment every tensor had when the kernel was verified (the oracle's 64-byte slots, at::empty's).
constexpr uintptr_t kVerifiedAlignment = 64;

// True when the kernel may read ``v``'s memory as the reference reads the tensor: exactly a
// Tensor or Parameter (a subclass's __torch_function__ is the reference's business), plain
// dispatch keys, no forward-mode tangent (nested forward AD has only level 0), and data
// aligned as in verification (a kernel may use aligned loads: x[1:] must not reach it).
bool plain_cpu(PyObject* v, const at::Tensor& t) {
  if (!THPVariable_CheckExact(v) || !kPlainCpu.isSupersetOf(t.key_set())) return false;
  if (t._fw_grad(0).defined()) return false;
  return t.numel() == 0 || reinterpret_cast<uintptr_t>(t.const_data_ptr()) % kVerifiedAlignment == 0;
}

// signature(args) -> bytes, or None where the call cannot take a cached plan.
// What fixes a call's outputs and whether the kernel may run: per tensor its dtype, contiguity,
// sizes and, when not contiguous, strides (plain_cpu tensors only, so the device is the CPU); per int/float/bool scalar its
// value. None, for the checked path to decide, for a tensor that requires grad while grad mode is
// on (autograd needs the reference; a module's parameters under no_grad do not) or is not plain_cpu, any other kind of argument, a call under CPU autocast
// (the reference's dtypes change) or a torch function or dispatch mode (it sees and may change
// the reference's operations), and a tensor whose properties cannot be read (a sparse CSR
// tensor throws on is_contiguous; an exception must not leave this C function).
PyObject* signature(PyObject*, PyObject* args) {
  PyObject* fast = PySequence_Fast(args, "the arguments must be a sequence");
  if (!fast) return nullptr;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  PyObject** items = PySequence_Fast_ITEMS(fast);
  c10::SmallVector<int64_t, 64> words;
  bool cacheable = !at::autocast::is_autocast_enabled(at::kCPU) && !at::impl::torch_function_mode_enabled() &&
                   !c10::impl::dispatch_mode_enabled();
  try {
    for (Py_ssize_t i = 0; cacheable && i < n; ++i) {
      PyObject* v = items[i];
      if (THPVariable_Check(v)) {
        const at::Tensor& t = THPVariable_Unpack(v);
        if ((t.requires_grad() && c10::GradMode::is_enabled()) || !plain_cpu(v, t)) { cacheable = false; break; }
        words.push_back(1);
        words.push_back(static_cast<int64_t>(t.scalar_type()));
        bool contiguous = t.is_contiguous();
        words.push_back(contiguous ? 1 : 0);
        words.push_back(t.dim());
        auto sizes = t.sizes();
        words.append(sizes.begin(), sizes.end());
        if (!contiguous) {  // verified per stride (arg_class): another layout of these sizes is another plan
          auto strides = t.strides();
          words.append(strides.begin(), strides.end());
        }
      } else if (PyBool_Check(v)) {
        words.push_back(2);
        words.push_back(v == Py_True);
      } else if (PyLong_CheckExact(v)) {
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow || (x == -1 && PyErr_Occurred())) { PyErr_Clear(); cacheable = false; break; }
        words.push_back(3);
        words.push_back(x);
      } else if (PyFloat_CheckExact(v)) {
        double x = PyFloat_AS_DOUBLE(v);
        int64_t bits;
        std::memcpy(&bits, &x, sizeof bits);
        words.push_back(4);
        words.push_back(bits);
      } else {
        cacheable = false;
      }
    }
  } catch (const std::exception&) {
    cacheable = false;
  }
  Py_DECREF(fast);
  if (!cacheable) Py_RETURN_NONE;
  return PyBytes_FromStringAndSize(reinterpret_cast<const char*>(words.data()),
                                   static_cast<Py_ssize_t>(words.size() * sizeof(int64_t)));
}

// same_values(held) -> bool: whether each (dict, values) pair's dict still holds exactly those
// value objects, in that order. A module target's parameter, buffer and child dictionaries are
// checked on every planned call (a reassigned weight or a new submodule must be seen); in
// Python the walk cost more than the rest of the call path, here a pointer comparison each.
PyObject* same_values(PyObject*, PyObject* held) {
  if (!PyTuple_Check(held)) {
    PyErr_SetString(PyExc_TypeError, "same_values takes a tuple of (dict, tuple) pairs");
    return nullptr;
  }
  for (Py_ssize_t i = 0, n = PyTuple_GET_SIZE(held); i < n; ++i) {
    PyObject* pair = PyTuple_GET_ITEM(held, i);
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 || !PyDict_Check(PyTuple_GET_ITEM(pair, 0)) ||
        !PyTuple_Check(PyTuple_GET_ITEM(pair, 1))) {
      PyErr_SetString(PyExc_TypeError, "same_values takes a tuple of (dict, tuple) pairs");
      return nullptr;
    }
    PyObject* d = PyTuple_GET_ITEM(pair, 0);
    PyObject* values = PyTuple_GET_ITEM(pair, 1);
    if (PyDict_GET_SIZE(d) != PyTuple_GET_SIZE(values)) Py_RETURN_FALSE;
    Py_ssize_t pos = 0, k = 0;
    PyObject *key, *value;
    while (PyDict_Next(d, &pos, &key, &value)) {
      if (k >= PyTuple_GET_SIZE(values) || value != PyTuple_GET_ITEM(values, k++)) Py_RETURN_FALSE;
    }
  }
  Py_RETURN_TRUE;
}

PyObject* set_abi_error(PyObject*, PyObject* cls) {
  if (!PyExceptionClass_Check(cls)) {
    PyErr_SetString(PyExc_TypeError, "an exception class");
    return nullptr;
  }
  Py_INCREF(cls);
  abi_error = cls;
  Py_RETURN_NONE;
}

}  // namespace

// A kernel that does nothing: what the trusted side times to measure the call path alone.
extern "C" int maxcode_noop(const DLTensor*, int32_t, DLTensor*, int32_t, void*) { return 0; }

namespace {

PyObject* noop_address(PyObject*, PyObject*) {
  return PyLong_FromVoidPtr(reinterpret_cast<void*>(&maxcode_noop));
}

PyMethodDef methods[] = {
    {"run", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(run)), METH_FASTCALL,
     "run(fn, args, extras, out_meta, device, stream): allocate, describe, call; outputs or the non-zero code"},
    {"run_into", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(run_into)), METH_FASTCALL,
     "run_into(fn, args, extras, outs, alloc_meta, device, stream): call writing into outs; the code"},
    {"signature", signature, METH_O, "signature(args): bytes naming what a cached call plan depends on, or None"},
    {"same_values", same_values, METH_O, "same_values(((dict, values), ...)): whether each dict holds exactly those objects"},
    {"set_abi_error", set_abi_error, METH_O, "the exception raised for arguments the ABI cannot carry"},
    {"noop_address", noop_address, METH_NOARGS, "the address of a maxcode_run that does nothing"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_maxcode_call", "The native ABI's compiled call path.", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__maxcode_call() { return PyModule_Create(&module); }
