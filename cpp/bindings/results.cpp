// _core.result(cls, values): an instance of the result dataclass `cls` with its fields, in declaration order, set
// to the items of the tuple `values`, straight into the instance's __dict__ (what a frozen dataclass's __init__
// does through object.__setattr__, a third of a microsecond of a microsecond op). The CPU backend wraps each
// binding's tuple with it (functools.partial, so no Python frame runs between the core call and the result).
#include <pybind11/pybind11.h>

namespace toporoute::bindings {

namespace {

PyObject* result(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyType_Check(args[0]) || !PyTuple_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "result(cls, values) takes a dataclass and a tuple");
    return nullptr;
  }
  static PyObject* const fields_name = PyUnicode_InternFromString("__dataclass_fields__");  // immutable
  PyObject* fields = PyObject_GetAttr(args[0], fields_name);
  if (fields == nullptr) return nullptr;
  const Py_ssize_t n = PyTuple_GET_SIZE(args[1]);
  if (!PyDict_Check(fields) || PyDict_GET_SIZE(fields) != n) {
    PyErr_Format(PyExc_TypeError, "result(): %R has %zd fields, the core returned %zd values", args[0],
                 PyDict_Check(fields) ? PyDict_GET_SIZE(fields) : Py_ssize_t{-1}, n);
    Py_DECREF(fields);
    return nullptr;
  }
  PyObject* empty = PyTuple_New(0);
  PyObject* obj = empty == nullptr ? nullptr : PyBaseObject_Type.tp_new(reinterpret_cast<PyTypeObject*>(args[0]),
                                                                          empty, nullptr);
  Py_XDECREF(empty);
  PyObject* dict = obj == nullptr ? nullptr : PyObject_GenericGetDict(obj, nullptr);
  bool ok = dict != nullptr;
  Py_ssize_t pos = 0, i = 0;
  PyObject *key, *value;
  while (ok && PyDict_Next(fields, &pos, &key, &value)) {
    ok = PyDict_SetItem(dict, key, PyTuple_GET_ITEM(args[1], i++)) == 0;
  }
  Py_XDECREF(dict);
  Py_DECREF(fields);
  if (!ok) {
    Py_XDECREF(obj);
    return nullptr;
  }
  return obj;
}

PyMethodDef result_def[] = {
    {"result", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&result)), METH_FASTCALL,
     "result(cls: type, values: tuple) -> object\n\nAn instance of the result dataclass cls with its fields set to "
     "the items of values, in declaration order (the CPU backend's results)."},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

void bind_results(pybind11::module_& m) {
  if (PyModule_AddFunctions(m.ptr(), result_def) != 0) throw pybind11::error_already_set();
}

}  // namespace toporoute::bindings
