//! Validation of an object against a CustomResourceDefinition's `openAPIV3Schema`, the way the
//! API server treats a structural schema under `kubectl apply`'s strict field validation: types,
//! enums, required fields, bounds, and every field the schema does not name is an error (the
//! server would prune it, or refuse it). A JSON-schema validator would accept unknown fields
//! unless each object said `additionalProperties: false`, which CRDs never do.

use std::path::Path;

use serde_json::Value;

/// The CRD in `file` (under tests/fixtures/crds): (group, kind, served version, schema).
pub struct Crd {
    pub api_version: String,
    pub kind: String,
    schema: Value,
}

impl Crd {
    pub fn load(file: &str) -> Crd {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/crds")
            .join(file);
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let crd: Value = serde_saphyr::from_str(&text).unwrap();
        let spec = &crd["spec"];
        let version = spec["versions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["served"] == true && v["storage"] == true)
            .expect("a served storage version");
        Crd {
            api_version: format!(
                "{}/{}",
                spec["group"].as_str().unwrap(),
                version["name"].as_str().unwrap()
            ),
            kind: spec["names"]["kind"].as_str().unwrap().to_string(),
            schema: version["schema"]["openAPIV3Schema"].clone(),
        }
    }

    /// Every way `object` breaks the schema, as `path: what`.
    pub fn violations(&self, object: &Value) -> Vec<String> {
        let mut out = Vec::new();
        if object["apiVersion"] != self.api_version.as_str() || object["kind"] != self.kind.as_str()
        {
            out.push(format!(
                "apiVersion/kind: {} {} is not {} {}",
                object["apiVersion"], object["kind"], self.api_version, self.kind
            ));
        }
        check(&self.schema, object, "", &mut out);
        out
    }
}

fn check(schema: &Value, value: &Value, path: &str, out: &mut Vec<String>) {
    let mut fail = |what: String| {
        out.push(format!(
            "{}: {what}",
            if path.is_empty() { "." } else { path }
        ))
    };
    if schema["x-kubernetes-int-or-string"] == true {
        if !(value.is_i64() || value.is_u64() || value.is_string()) {
            fail(format!("{value} is neither an integer nor a string"));
        }
        return;
    }
    let ok = match schema["type"].as_str() {
        None => true,
        Some("object") => value.is_object(),
        Some("array") => value.is_array(),
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        Some(other) => {
            fail(format!(
                "the schema's type {other} is not known to this checker"
            ));
            false
        }
    };
    if !ok {
        fail(format!("{value} is not of type {}", schema["type"]));
        return;
    }
    if let Some(choices) = schema["enum"].as_array() {
        if !choices.contains(value) {
            fail(format!("{value} is not one of {choices:?}"));
        }
    }
    if let (Some(n), Some(min)) = (value.as_f64(), schema["minimum"].as_f64()) {
        if n < min {
            fail(format!("{n} is below the minimum {min}"));
        }
    }
    if let (Some(n), Some(max)) = (value.as_f64(), schema["maximum"].as_f64()) {
        if n > max {
            fail(format!("{n} is above the maximum {max}"));
        }
    }
    if let (Some(s), Some(max)) = (value.as_str(), schema["maxLength"].as_u64()) {
        if s.chars().count() as u64 > max {
            fail(format!("{s:?} is longer than {max}"));
        }
    }
    if let Some(object) = value.as_object() {
        for name in schema["required"].as_array().into_iter().flatten() {
            if !object.contains_key(name.as_str().unwrap_or_default()) {
                fail(format!("the required field {name} is missing"));
            }
        }
        // The root's metadata is the API server's own ObjectMeta, validated apart from the CRD.
        let open = schema["x-kubernetes-preserve-unknown-fields"] == true || path == ".metadata";
        for (key, inner) in object {
            let inner_path = format!("{path}.{key}");
            if let Some(property) = schema["properties"].get(key) {
                check(property, inner, &inner_path, out);
            } else if schema["additionalProperties"].is_object() {
                check(&schema["additionalProperties"], inner, &inner_path, out);
            } else if !(open || schema["additionalProperties"] == true) {
                out.push(format!("{inner_path}: a field the schema does not have"));
            }
        }
    }
    if let Some(items) = value.as_array() {
        for (i, item) in items.iter().enumerate() {
            check(&schema["items"], item, &format!("{path}[{i}]"), out);
        }
    }
}
