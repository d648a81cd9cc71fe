//! The JSONPath subset a kubeconfig's `token-key` and `expiry-key` use (`{.credential.token}`,
//! `$.items[0].name`, `['a.b']`, `*`), behind the query call kube-client makes. Anything
//! outside it is an error that names the path, never a silent empty answer.

use std::fmt;

use serde_json::Value;

/// Why a path was not evaluated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonPathError {
    path: String,
    reason: &'static str,
}

impl fmt::Display for JsonPathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "JSONPath {:?}: {} (paddle-launcher reads $, .name, ['name'], [index] and * only)",
            self.path, self.reason
        )
    }
}

impl std::error::Error for JsonPathError {}

pub type Queried<T> = Result<T, JsonPathError>;

/// jsonpath-rust's entry point, as kube-client calls it.
pub trait JsonPath {
    /// The values `path` selects, in document order.
    fn query(&self, path: &str) -> Queried<Vec<&Self>>;
}

impl JsonPath for Value {
    fn query(&self, path: &str) -> Queried<Vec<&Value>> {
        let steps = parse(path)?;
        let mut selected = vec![self];
        for step in &steps {
            selected = selected
                .into_iter()
                .flat_map(|value| step.select(value))
                .collect();
        }
        Ok(selected)
    }
}

#[derive(Debug, PartialEq)]
enum Step {
    Member(String),
    Index(i64),
    Every,
}

impl Step {
    fn select<'v>(&self, value: &'v Value) -> Vec<&'v Value> {
        match (self, value) {
            (Step::Member(name), Value::Object(members)) => members.get(name).into_iter().collect(),
            (Step::Index(index), Value::Array(items)) => {
                let at = if *index < 0 {
                    items.len() as i64 + index
                } else {
                    *index
                };
                usize::try_from(at)
                    .ok()
                    .and_then(|at| items.get(at))
                    .into_iter()
                    .collect()
            }
            (Step::Every, Value::Object(members)) => members.values().collect(),
            (Step::Every, Value::Array(items)) => items.iter().collect(),
            _ => Vec::new(),
        }
    }
}

fn parse(path: &str) -> Queried<Vec<Step>> {
    let fail = |reason| JsonPathError {
        path: path.to_string(),
        reason,
    };
    let mut rest = path
        .strip_prefix('$')
        .ok_or_else(|| fail("does not start with $"))?;
    let mut steps = Vec::new();
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            if after.starts_with('.') {
                return Err(fail("descendants (..) are not read"));
            }
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let name = &after[..end];
            steps.push(match name {
                "" => return Err(fail("a dot without a name")),
                "*" => Step::Every,
                _ if name.chars().all(is_name_char) => Step::Member(name.to_string()),
                _ => {
                    return Err(fail(
                        "a name after a dot that is not letters, digits, _, - or non-ASCII",
                    ))
                }
            });
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let end = closing_bracket(after).ok_or_else(|| fail("a [ without its ]"))?;
            let inside = after[..end].trim();
            steps.push(
                bracket(inside)
                    .ok_or_else(|| fail("a selector that is not a name, an index or *"))?,
            );
            rest = &after[end + 1..];
        } else {
            return Err(fail("expected . or [ after a step"));
        }
    }
    Ok(steps)
}

/// Where the `]` closing a bracket is, skipping one inside a quoted name.
fn closing_bracket(after: &str) -> Option<usize> {
    let mut quote = None;
    for (at, c) in after.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(open), _) if c == open => quote = None,
            (None, ']') => return Some(at),
            _ => {}
        }
    }
    None
}

fn bracket(inside: &str) -> Option<Step> {
    if inside == "*" {
        return Some(Step::Every);
    }
    for quote in ['\'', '"'] {
        if let Some(name) = inside
            .strip_prefix(quote)
            .and_then(|s| s.strip_suffix(quote))
        {
            if !name.contains(quote) && !name.contains('\\') {
                return Some(Step::Member(name.to_string()));
            }
            return None;
        }
    }
    index(inside).map(Step::Index)
}

/// A name after a dot: RFC 9535's shorthand (letters, digits, `_`, anything not ASCII) and
/// `-`, which kubectl's JSONPath allows in field names.
fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-' || !c.is_ascii()
}

/// An index as RFC 9535 writes it: `0`, or digits without a leading zero, maybe after `-`.
fn index(text: &str) -> Option<i64> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    let canonical =
        digits == "0" && !text.starts_with('-') || (!digits.starts_with('0') && !digits.is_empty());
    let all_digits = digits.chars().all(|c| c.is_ascii_digit());
    (canonical && all_digits)
        .then(|| text.parse().ok())
        .flatten()
}
