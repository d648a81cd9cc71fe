//! The shape of the code, checked: the modules' imports (`crate::`, `super::` and `self::` paths
//! and a module's own children, outside test modules) form no cycle, and the pure core imports
//! nothing of the I/O shell, logs nothing and reads no clock. A cycle that comes back, or a core
//! module that starts reading files, talking to the network, logging or reading the time, fails
//! here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The pure core is a crate of its own (crates/core): configuration -> membership -> ranks ->
/// process plan, the state machines that decide every exit and restart, batch-system
/// detection, and the words they share. What it may not depend on, the compiler keeps out;
/// what it may not do with what it has (read the clock, log, touch files), these tests.
const CORE_ROOT: &str = "crates/core/src";

/// The I/O shell: the `paddle-launcher` crate.
const SHELL_ROOT: &str = "src";

/// Crates the core may not depend on: an I/O runtime, the Kubernetes client, system calls,
/// logging.
const NOT_IN_THE_CORE: &[&str] = &["tokio", "kube", "nix", "tracing", "hyper", "futures"];

/// Core modules that still log directly, each with why it is not yet a machine that returns
/// what to say (a newcomer reads this list as the work left, not as permission).
const STILL_LOGS: &[(&str, &str)] = &[];

/// Every module of the crate whose sources are under `root` (path -> source without its test
/// module).
fn modules(root: &str) -> BTreeMap<String, String> {
    fn walk(dir: &Path, root: &Path, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, root, out);
                continue;
            }
            if path.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let relative = path.strip_prefix(root).unwrap().with_extension("");
            let mut parts: Vec<String> = relative
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code = match text.find("#[cfg(test)]\nmod tests") {
                Some(at) => text[..at].to_string(),
                None => text,
            };
            out.insert(parts.join("::"), code);
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(root);
    let mut out = BTreeMap::new();
    walk(&root, &root, &mut out);
    out
}

/// The `crate::` paths a source names, each as its segments (`use crate::{a, b::c}` too).
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                paths.push(segments(item.trim()));
            }
        } else {
            paths.push(segments(rest));
        }
    }
    paths
}

fn segments(text: &str) -> Vec<String> {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(text.len());
    text[..end]
        .split("::")
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// The paths a source names after `prefix` (`super::`, `self::`), each as its segments, where
/// `prefix` starts a path (not `Self::`, not the end of another name).
fn relative_paths(code: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut at = 0;
    while let Some(found) = code[at..].find(prefix) {
        let start = at + found;
        at = start + prefix.len();
        let before = code[..start].chars().next_back();
        let joined = before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
        if joined {
            continue;
        }
        let rest = &code[at..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                paths.push(segments(item.trim()));
            }
        } else {
            paths.push(segments(rest));
        }
    }
    paths
}

/// The first segments of the `use` statements of a source that name no crate, `std`, `super`
/// or `self`: a module's own children (`use attempt::Attempts;` in `launch/mod.rs`).
fn child_paths(code: &str) -> Vec<Vec<String>> {
    code.lines()
        .filter_map(|line| {
            let line = line.trim_start();
            let rest = line
                .strip_prefix("pub use ")
                .or_else(|| line.strip_prefix("pub(crate) use "))
                .or_else(|| line.strip_prefix("pub(super) use "))
                .or_else(|| line.strip_prefix("use "))?;
            Some(segments(rest))
        })
        .filter(|path| {
            path.first().is_some_and(|first| {
                !matches!(first.as_str(), "crate" | "std" | "super" | "self" | "core")
            })
        })
        .collect()
}

/// The module `super` means in `module` (whose file is `is_mod_rs` a `mod.rs`): its parent.
fn parent(module: &str) -> String {
    match module.rfind("::") {
        Some(at) => module[..at].to_string(),
        None => String::new(),
    }
}

/// Every module path a module's source names, resolved from the crate root.
fn named_paths(name: &str, code: &str) -> Vec<Vec<String>> {
    let mut paths = crate_paths(code);
    let within = |base: &str, rest: &[String]| -> Vec<String> {
        let mut path: Vec<String> = base
            .split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        path.extend(rest.iter().cloned());
        path
    };
    for relative in relative_paths(code, "super::") {
        let mut base = parent(name);
        let mut rest = relative.as_slice();
        while rest.first().map(String::as_str) == Some("super") {
            base = parent(&base);
            rest = &rest[1..];
        }
        paths.push(within(&base, rest));
    }
    for relative in relative_paths(code, "self::") {
        paths.push(within(name, &relative));
    }
    for child in child_paths(code) {
        paths.push(within(name, &child));
    }
    paths
}

/// The modules each module of the crate under `root` imports: for every path it names, the
/// longest module of that crate it names.
fn imports(root: &str) -> BTreeMap<String, BTreeSet<String>> {
    let modules = modules(root);
    let mut graph = BTreeMap::new();
    for (name, code) in &modules {
        let mut targets = BTreeSet::new();
        for path in named_paths(name, code) {
            let target = (1..=path.len())
                .rev()
                .map(|n| path[..n].join("::"))
                .find(|candidate| modules.contains_key(candidate));
            // A module's own children are its parts, not its imports.
            let own_part = |t: &String| t.starts_with(&format!("{name}::"));
            if let Some(target) = target.filter(|t| t != name && !own_part(t)) {
                targets.insert(target);
            }
        }
        graph.insert(name.clone(), targets);
    }
    graph
}

/// A cycle through `from`, if any (depth-first, the path so far in `stack`).
fn cycle(
    graph: &BTreeMap<String, BTreeSet<String>>,
    node: &str,
    stack: &mut Vec<String>,
    done: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if let Some(at) = stack.iter().position(|n| n == node) {
        let mut found = stack[at..].to_vec();
        found.push(node.to_string());
        return Some(found);
    }
    if done.contains(node) {
        return None;
    }
    stack.push(node.to_string());
    for next in graph.get(node).into_iter().flatten() {
        if let Some(found) = cycle(graph, next, stack, done) {
            return Some(found);
        }
    }
    stack.pop();
    done.insert(node.to_string());
    None
}

#[test]
fn the_import_graph_has_no_cycle() {
    for root in [CORE_ROOT, SHELL_ROOT] {
        let graph = imports(root);
        assert!(
            graph.len() > 25,
            "too few modules found under {root}: {:?}",
            graph.keys()
        );
        let mut done = BTreeSet::new();
        for node in graph.keys() {
            if let Some(found) = cycle(&graph, node, &mut Vec::new(), &mut done) {
                panic!("import cycle under {root}: {}", found.join(" -> "));
            }
        }
    }
}

/// What the core crate depends on: none of `NOT_IN_THE_CORE` (its manifest, read as the
/// compiler reads it: a dependency named there is one the core could call).
fn core_dependencies() -> Vec<String> {
    let manifest = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/core/Cargo.toml"),
    )
    .unwrap();
    let mut deps = Vec::new();
    let mut within = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            within = line.ends_with("dependencies]");
            continue;
        }
        if within && !line.starts_with('#') {
            if let Some((name, _)) = line.split_once('=') {
                deps.push(name.trim().to_string());
            }
        }
    }
    deps
}

#[test]
fn the_pure_core_depends_on_no_io_and_does_none() {
    let deps = core_dependencies();
    assert!(deps.contains(&"serde".to_string()), "{deps:?}");
    let mut wrong: Vec<String> = deps
        .iter()
        .filter(|dep| NOT_IN_THE_CORE.contains(&dep.as_str()))
        .map(|dep| format!("the core depends on {dep}"))
        .collect();
    let core = modules(CORE_ROOT);
    assert!(core.contains_key("attempt_loop") && core.contains_key("control::coordinator"));
    for (module, code) in &core {
        // Nor does it do I/O with what std has.
        for io in ["std::fs", "std::net::TcpStream", "std::process"] {
            if code.contains(io) {
                wrong.push(format!("{module} uses {io}"));
            }
        }
        // Nor reads the clock: the time comes in as an input.
        for clock in ["Instant::now", "SystemTime::now", "Utc::now"] {
            if code.contains(clock) {
                wrong.push(format!("{module} reads the clock ({clock})"));
            }
        }
        let logs = [
            "info!(",
            "warn!(",
            "debug!(",
            "error!(",
            "trace!(",
            "println!(",
        ]
        .iter()
        .any(|log| code.contains(log));
        let excused = STILL_LOGS
            .iter()
            .any(|(m, _)| m == module || module.starts_with(&format!("{m}::")));
        if logs != excused {
            wrong.push(match logs {
                true => format!("{module} logs"),
                false => format!("{module} no longer logs: take it off STILL_LOGS"),
            });
        }
    }
    // No module of the core is also the shell's: the shell re-exports it. (`control` is both:
    // the channel's data and machines here, its sockets and tasks there.)
    let shell = modules(SHELL_ROOT);
    for module in core.keys().filter(|m| !m.is_empty() && *m != "control") {
        if shell.contains_key(module) {
            wrong.push(format!("{module} is in both crates"));
        }
    }
    assert!(wrong.is_empty(), "the core is not pure: {wrong:#?}");
}

/// The import resolution sees what a `crate::`-only reading missed: a child module named by
/// `super::` from its sibling, `self::`, and a `mod.rs`'s own children.
#[test]
fn relative_imports_are_resolved_from_the_module() {
    let core = imports(CORE_ROOT);
    assert!(
        core["control::coordinator"].contains("control::heard"),
        "super::heard from control::coordinator: {:?}",
        core["control::coordinator"]
    );
    let graph = imports(SHELL_ROOT);
    let of = |module: &str| graph.get(module).cloned().unwrap_or_default();
    assert!(
        of("launch::attempt").contains("launch::ending"),
        "{:?}",
        of("launch::attempt")
    );
    // launch/mod.rs names its children by `use attempt::...`: parts, not imports; what they
    // import is theirs.
    assert!(
        !of("launch").contains("launch::attempt"),
        "{:?}",
        of("launch")
    );
    assert_eq!(
        named_paths("a::b", "use super::super::c::D;\nuse self::e::F;"),
        vec![
            vec!["c".to_string(), "D".to_string()],
            vec!["a".into(), "b".into(), "e".into(), "F".into()]
        ]
    );
}

/// The checks above see what they claim to: a cycle and a shell import are found in sources
/// made for it (so an empty graph or a parser that misses `use crate::{..}` cannot pass).
#[test]
fn the_checks_find_a_planted_cycle_and_shell_import() {
    let paths = crate_paths("use crate::{a::B, b};\nfn f() { crate::c::d(); }");
    assert_eq!(
        paths,
        [vec!["a", "B"], vec!["b"], vec!["c", "d"]]
            .iter()
            .map(|p| p.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .collect::<Vec<_>>()
    );
    let graph: BTreeMap<String, BTreeSet<String>> =
        [("a", vec!["b"]), ("b", vec!["c"]), ("c", vec!["a"])]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.into_iter().map(str::to_string).collect()))
            .collect();
    let found = cycle(&graph, "a", &mut Vec::new(), &mut BTreeSet::new()).unwrap();
    assert_eq!(found, ["a", "b", "c", "a"]);
    let core = modules(CORE_ROOT);
    assert!(core.contains_key("config::topology") && !core.contains_key("launch"));
    assert!(!core.contains_key("discover") && modules(SHELL_ROOT).contains_key("discover"));
}

/// Where the configuration may be changed: while it is built, before anything runs (the
/// options, the batch system's fill-in, the devices, and `launch::setup::configure`, which
/// completes it: address, sockets, the coordinator, the progress file). Every
/// other module gets it complete and reads it (`doctor` builds its own, as `run` does, to say
/// each step).
const BUILDS_THE_CONFIGURATION: &[&str] =
    &["config", "discover", "devices", "launch::setup", "doctor"];

#[test]
fn the_configuration_is_built_in_one_place_and_never_amended() {
    let mut wrong = Vec::new();
    let mut all = modules(CORE_ROOT);
    all.extend(modules(SHELL_ROOT));
    for (module, code) in all {
        let builds = BUILDS_THE_CONFIGURATION
            .iter()
            .any(|m| module == *m || module.starts_with(&format!("{m}::")));
        let amends = [
            "&mut Config",
            "mut config: Config",
            "config: &mut crate::config::Config",
        ]
        .iter()
        .any(|pattern| code.contains(pattern));
        if amends && !builds {
            wrong.push(module);
        }
    }
    assert!(
        wrong.is_empty(),
        "these modules change the configuration after it is built: {wrong:?}"
    );
}

/// Every file, module, type, function and variant docs/architecture.md names in backticks
/// exists: a renamed or deleted one fails here, not in a reader's search. A name is found as a
/// file or folder, or as an item defined in the sources (`struct`, `enum`, `fn`, ...), or as an
/// enum variant; `a::b::C` needs each of its parts, `Type(args)` its name.
#[test]
fn every_name_in_the_architecture_doc_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let mut sources = Vec::new();
    let mut files = BTreeSet::new();
    fn walk(dir: &Path, sources: &mut Vec<String>, files: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if path.is_dir() {
                files.insert(name);
                walk(&path, sources, files);
            } else if name.ends_with(".rs") {
                files.insert(name.trim_end_matches(".rs").to_string());
                files.insert(name);
                sources.push(std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    for dir in [SHELL_ROOT, CORE_ROOT, "tests", "benches"] {
        walk(&root.join(dir), &mut sources, &mut files);
    }
    let defined = |name: &str| {
        files.contains(name)
            || sources.iter().any(|code| {
                code.lines().any(|line| {
                    let line = line.trim_start();
                    let item = [
                        "struct ", "enum ", "trait ", "type ", "fn ", "const ", "mod ",
                    ]
                    .iter()
                    .any(|kind| {
                        let after = line
                            .trim_start_matches("pub ")
                            .trim_start_matches("pub(crate) ")
                            .trim_start_matches("pub(super) ")
                            .trim_start_matches("async ");
                        after.strip_prefix(kind).is_some_and(|rest| {
                            rest.starts_with(name)
                                && !rest[name.len()..]
                                    .starts_with(|c: char| c.is_alphanumeric() || c == '_')
                        })
                    });
                    // An enum variant: the name alone at the start of its line.
                    let variant = line.strip_prefix(name).is_some_and(|rest| {
                        rest.is_empty() || rest.starts_with([',', ' ', '(', '{'])
                    }) && name.starts_with(|c: char| c.is_ascii_uppercase());
                    item || variant
                })
            })
    };
    let mut missing = Vec::new();
    for (i, token) in doc.split('`').enumerate() {
        // Odd pieces are inside backticks; names only (no flags, endpoints, globs, prose).
        if i % 2 == 0 || token.contains(' ') || token.starts_with(['-', '/']) || token.contains('*')
        {
            continue;
        }
        let name = token.split('(').next().unwrap();
        // The crate's own paths from its root; the standard library's are not ours to check.
        let name = name.strip_prefix("crate::").unwrap_or(name);
        if name.starts_with("std::") {
            continue;
        }
        if name.contains('/') {
            let path = name.trim_end_matches('/');
            let found = ["", "src/", "crates/core/src/"].iter().any(|base| {
                let at = root.join(format!("{base}{path}"));
                at.exists() || at.with_extension("rs").exists()
            }) || (!path.contains('/') && files.contains(path));
            if !found {
                missing.push(token.to_string());
            }
            continue;
        }
        if name.ends_with(".rs") {
            if !files.contains(name) {
                missing.push(token.to_string());
            }
            continue;
        }
        let parts: Vec<&str> = name.split("::").collect();
        if parts
            .iter()
            .any(|part| !part.chars().all(|c| c.is_alphanumeric() || c == '_'))
        {
            continue;
        }
        // `module::Item::method`: the module a file or folder under src/, its items defined
        // in it (its file, or the files of its folder); else each part anywhere.
        let module = (1..parts.len()).rev().find_map(|n| {
            let mut inside = Vec::new();
            for base in [SHELL_ROOT, CORE_ROOT] {
                let path = root.join(base).join(parts[..n].join("/"));
                let file = path.with_extension("rs");
                if file.exists() {
                    inside.push(std::fs::read_to_string(file).unwrap());
                }
                if path.is_dir() {
                    walk(&path, &mut inside, &mut BTreeSet::new());
                }
            }
            (!inside.is_empty()).then_some((n, inside))
        });
        let found = match module {
            Some((n, inside)) => parts[n..].iter().all(|part| {
                inside.iter().any(|code| {
                    code.contains(&format!("fn {part}"))
                        || code.contains(&format!("struct {part}"))
                        || code.contains(&format!("enum {part}"))
                        || code.contains(&format!("type {part}"))
                        || code.contains(&format!("const {part}"))
                        || code.contains(&format!("mod {part}"))
                        || code.contains(&format!("    {part}"))
                })
            }),
            None => parts.iter().all(|part| defined(part)),
        };
        if !found {
            missing.push(token.to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "docs/architecture.md names what the code does not have: {missing:?}"
    );
}
