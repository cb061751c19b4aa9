//! Python request fields → the JSON value gauge's parser reads, so Python, the CLI and the server
//! share one parser (`SamplingParams::from_value`) and one set of error messages.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Number, Value};

/// A dict (or a JSON string) of request fields as a JSON value. `path` names the place of a value
/// that JSON cannot hold (a non-finite float, a non-string key, an unknown type).
pub fn to_value(obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    if let Ok(text) = obj.cast::<PyString>() {
        let text: String = text.extract()?;
        let text = text.as_str();
        return serde_json::from_str(text).map_err(|e| {
            PyValueError::new_err(gauge_sampling::SamplingError::Json(e.to_string()).to_string())
        });
    }
    convert(obj, "params")
}

fn convert(obj: &Bound<'_, PyAny>, path: &str) -> PyResult<Value> {
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if obj.is_instance_of::<PyInt>()
        || (obj.hasattr("__index__")? && !obj.is_instance_of::<PyFloat>())
    {
        let i = obj.call_method0("__index__")?;
        if let Ok(v) = i.extract::<i64>() {
            return Ok(Value::from(v));
        }
        if let Ok(v) = i.extract::<u64>() {
            return Ok(Value::from(v));
        }
        return Err(PyValueError::new_err(format!(
            "`{path}`: the integer {} does not fit in 64 bits",
            i.str()?
        )));
    }
    if obj.is_instance_of::<PyFloat>()
        || obj.hasattr("__float__")? && !obj.is_instance_of::<PyString>()
    {
        let x: f64 = obj.call_method0("__float__")?.extract()?;
        return Number::from_f64(x).map(Value::Number).ok_or_else(|| {
            PyValueError::new_err(format!(
                "invalid value for `{path}`: {x} (allowed: a finite number)"
            ))
        });
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Value::String(s.extract::<String>()?));
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        let mut m = Map::new();
        for (k, v) in d.iter() {
            let key = k.cast::<PyString>().map_err(|_| {
                PyValueError::new_err(format!(
                    "`{path}` has a non-string key {}: request fields are named by strings",
                    k.repr().map(|r| r.to_string()).unwrap_or_default()
                ))
            })?;
            let key: String = key.extract()?;
            let value = convert(&v, &key)?;
            m.insert(key, value);
        }
        return Ok(Value::Object(m));
    }
    if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        let items = obj
            .try_iter()?
            .map(|x| convert(&x?, path))
            .collect::<PyResult<Vec<_>>>()?;
        return Ok(Value::Array(items));
    }
    Err(PyValueError::new_err(format!(
        "`{path}` is a {}: request fields are numbers, strings, booleans, lists or dicts",
        obj.get_type().name()?
    )))
}
