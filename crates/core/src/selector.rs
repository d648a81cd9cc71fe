//! Kubernetes label selectors (the `labelSelector` query syntax): parsed once so that a bad
//! selector is rejected before any API call, and matched locally for static checks and tests.

use std::collections::BTreeMap;
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed selector; `Display` gives the canonical text sent to the API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelSelector {
    pub requirements: Vec<Requirement>,
}

impl LabelSelector {
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut requirements = Vec::new();
        for part in split_top_level(text)? {
            let part = part.trim();
            if part.is_empty() {
                return Err("an empty requirement (stray comma?)".into());
            }
            requirements.push(parse_requirement(part)?);
        }
        if requirements.is_empty() {
            return Err("at least one requirement, e.g. job-name=my-job".into());
        }
        Ok(LabelSelector { requirements })
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| match r {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        })
    }
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .requirements
            .iter()
            .map(|r| match r {
                Requirement::Equals(k, v) => format!("{k}={v}"),
                Requirement::NotEquals(k, v) => format!("{k}!={v}"),
                Requirement::In(k, vs) => format!("{k} in ({})", vs.join(",")),
                Requirement::NotIn(k, vs) => format!("{k} notin ({})", vs.join(",")),
                Requirement::Exists(k) => k.clone(),
                Requirement::DoesNotExist(k) => format!("!{k}"),
            })
            .collect();
        f.write_str(&parts.join(","))
    }
}

/// Splits on commas that are not inside `( ... )` value sets.
fn split_top_level(text: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.checked_sub(1).ok_or("a ')' without its '('")?,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("a '(' without its ')'".into());
    }
    parts.push(&text[start..]);
    Ok(parts)
}

fn parse_requirement(part: &str) -> Result<Requirement, String> {
    if let Some(key) = part.strip_prefix('!') {
        return Ok(Requirement::DoesNotExist(label_key(key.trim())?));
    }
    for (op, build) in [
        (
            "!=",
            Requirement::NotEquals as fn(String, String) -> Requirement,
        ),
        ("==", Requirement::Equals),
        ("=", Requirement::Equals),
    ] {
        if let Some((k, v)) = part.split_once(op) {
            return Ok(build(label_key(k.trim())?, label_value(v.trim())?));
        }
    }
    let words: Vec<&str> = part.splitn(2, char::is_whitespace).collect();
    if let [key, rest] = words[..] {
        let rest = rest.trim_start();
        for (op, build) in [
            (
                "notin",
                Requirement::NotIn as fn(String, Vec<String>) -> Requirement,
            ),
            ("in", Requirement::In),
        ] {
            if let Some(set) = rest.strip_prefix(op) {
                return Ok(build(label_key(key)?, value_set(set.trim())?));
            }
        }
        return Err(format!("an operator (=, ==, !=, in, notin) in `{part}`"));
    }
    Ok(Requirement::Exists(label_key(part)?))
}

fn value_set(set: &str) -> Result<Vec<String>, String> {
    let inner = set
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| format!("a parenthesised value set, got `{set}`"))?;
    let values = inner
        .split(',')
        .map(|v| label_value(v.trim()))
        .collect::<Result<Vec<_>, _>>()?;
    if values.iter().all(String::is_empty) {
        return Err("a non-empty value set".into());
    }
    Ok(values)
}

/// `[prefix/]name`: prefix a DNS subdomain, name 1-63 of [A-Za-z0-9._-] starting and ending
/// alphanumeric — the rules the API server enforces.
pub fn label_key(key: &str) -> Result<String, String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if !is_dns_subdomain(p) {
            return Err(format!("a DNS subdomain as label key prefix, got `{p}`"));
        }
    }
    if name.is_empty() || !is_label_token(name) {
        return Err(format!(
            "a label key of 1-63 letters, digits, '-', '_' or '.', starting and ending alphanumeric, got `{key}`"
        ));
    }
    Ok(key.to_string())
}

pub fn label_value(value: &str) -> Result<String, String> {
    if value.is_empty() || is_label_token(value) {
        Ok(value.to_string())
    } else {
        Err(format!(
            "a label value of at most 63 letters, digits, '-', '_' or '.', starting and ending alphanumeric, got `{value}`"
        ))
    }
}

fn is_label_token(s: &str) -> bool {
    s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// RFC 1123 label: lowercase alphanumerics and '-', 1-63, alphanumeric at both ends.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 subdomain: dot-separated labels, at most 253 characters.
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parses_and_matches_every_operator() {
        let s = LabelSelector::parse(
            "job-name=a, tier!=db,env in (prod, dev),zone notin (x),batch.kubernetes.io/job-name,!skip",
        )
        .unwrap();
        assert_eq!(
            s.to_string(),
            "job-name=a,tier!=db,env in (prod,dev),zone notin (x),batch.kubernetes.io/job-name,!skip"
        );
        let good = labels(&[
            ("job-name", "a"),
            ("env", "dev"),
            ("batch.kubernetes.io/job-name", "a"),
        ]);
        assert!(s.matches(&good));
        let mut bad = good.clone();
        bad.insert("skip".into(), "1".into());
        assert!(!s.matches(&bad));
        let mut other_job = good.clone();
        other_job.insert("job-name".into(), "b".into());
        assert!(!s.matches(&other_job));
        let mut wrong_env = good;
        wrong_env.insert("env".into(), "qa".into());
        assert!(!s.matches(&wrong_env));
    }

    #[test]
    fn rejects_malformed_selectors() {
        for bad in [
            "",
            "a=b,",
            "job name=x",
            "a in b",
            "a in (b",
            "-a=b",
            "a=b c",
            "x/=y",
            "A_B/c=d",
        ] {
            assert!(LabelSelector::parse(bad).is_err(), "accepted {bad:?}");
        }
    }

    #[test]
    fn dns_names() {
        assert!(is_dns_label("paddle-cluster-job"));
        assert!(!is_dns_label("Paddle"));
        assert!(!is_dns_label("-a"));
        assert!(!is_dns_label(&"a".repeat(64)));
        assert!(is_dns_subdomain("pod-1.example"));
        assert!(!is_dns_subdomain("pod..x"));
    }
}
