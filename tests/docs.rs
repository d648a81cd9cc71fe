//! The documentation holds together: every relative link of README.md, docs/*.md, BENCHMARKS.md
//! and k8s-examples/README.md names a file that exists, and its `#anchor` a heading of that file
//! (by GitHub's slugs); the README stays a front page of at most 12 KiB that links to every page
//! of docs/.
//!
//! Plain string scanning, no Markdown parser: fenced code blocks and code spans are skipped, a
//! link is `](target)` (its text may span lines) or a reference definition `[name]: target`.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// The front page's size limit, in bytes.
const FRONT_PAGE_LIMIT: usize = 12 * 1024;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The pages of docs/, relative to the repository, by name.
fn doc_pages(root: &Path) -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("a docs/ directory")
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .map(|path| path.strip_prefix(root).unwrap().to_path_buf())
        .collect();
    pages.sort();
    pages
}

/// The files whose links are checked, relative to the repository.
fn checked_files(root: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = ["README.md", "BENCHMARKS.md", "k8s-examples/README.md"]
        .iter()
        .map(PathBuf::from)
        .collect();
    files.extend(doc_pages(root));
    files
}

/// The text with fenced code blocks and code spans blanked out (newlines kept, so that byte
/// offsets still give line numbers).
fn prose(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    // The opening fence (its character and length) while inside a fenced block.
    let mut fence: Option<(char, usize)> = None;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let run = |c: char| trimmed.chars().take_while(|&x| x == c).count();
        let blank = match fence {
            Some((c, n)) => {
                if run(c) >= n && trimmed.trim_start_matches(c).trim().is_empty() {
                    fence = None;
                }
                true
            }
            None => {
                for c in ['`', '~'] {
                    if run(c) >= 3 {
                        fence = Some((c, run(c)));
                    }
                }
                fence.is_some()
            }
        };
        if blank {
            out.extend(line.chars().map(|c| if c == '\n' { '\n' } else { ' ' }));
        } else {
            out.push_str(line);
        }
    }
    blank_code_spans(&out)
}

/// Code spans (`` `...` ``, a run of backticks closed by a run of the same length) replaced by
/// spaces; an unclosed run stays as it is.
fn blank_code_spans(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = chars.clone();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            i += 1;
            continue;
        }
        let open = chars[i..].iter().take_while(|&&c| c == '`').count();
        let mut j = i + open;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let n = chars[j..].iter().take_while(|&&c| c == '`').count();
                if n == open {
                    close = Some(j + n);
                    break;
                }
                j += n;
            } else {
                j += 1;
            }
        }
        match close {
            Some(end) => {
                for c in &mut out[i..end] {
                    if *c != '\n' {
                        *c = ' ';
                    }
                }
                i = end;
            }
            None => i += open,
        }
    }
    out.into_iter().collect()
}

/// GitHub's anchor for a heading: lower case, every character that is not a letter, a digit,
/// `-`, `_` or a space dropped, each space a `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|&c| c.is_alphanumeric() || c == '-' || c == '_' || c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of the ATX headings (`#` .. `######`) of a text whose fenced code blocks are
/// blanked out; a repeated heading gets `-1`, `-2`, ... as on GitHub.
fn anchors(text: &str) -> Vec<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        let hashes = trimmed.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || line.len() - trimmed.len() > 3 {
            continue;
        }
        let rest = &trimmed[hashes..];
        if !(rest.is_empty() || rest.starts_with(' ')) {
            continue;
        }
        // A heading's code spans count as their text.
        let title = rest.trim().trim_end_matches('#').replace('`', "");
        let base = slug(&title);
        let n = seen.entry(base.clone()).or_insert(0);
        out.push(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// A file's heading anchors, from its prose (so that `# comment` lines in code blocks are none).
fn file_anchors(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    anchors(&prose_keeping_code_spans(&text))
}

/// The text with only fenced code blocks blanked out: `prose` on a copy whose backticks
/// outside fence lines are set aside (as U+0001), then put back.
fn prose_keeping_code_spans(text: &str) -> String {
    let protected: String = text
        .split_inclusive('\n')
        .map(|line| {
            if line.trim_start().starts_with("```") {
                line.to_string()
            } else {
                line.replace('`', "\u{1}")
            }
        })
        .collect();
    prose(&protected).replace('\u{1}', "`")
}

/// Each link target of a Markdown text with its line number: `](target)` and `[name]: target`.
fn links(text: &str) -> Vec<(usize, String)> {
    let prose = prose(text);
    let line_of = |offset: usize| prose[..offset].matches('\n').count() + 1;
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = prose[from..].find("](") {
        let start = from + at + 2;
        let end = prose[start..].find(')').map_or(prose.len(), |e| start + e);
        let target = prose[start..end].split_whitespace().next().unwrap_or("");
        out.push((line_of(start), target.trim_matches(['<', '>']).to_string()));
        from = start;
    }
    for (i, line) in prose.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix('[') {
            if let Some((_, after)) = rest.split_once("]:") {
                if let Some(target) = after.split_whitespace().next() {
                    out.push((i + 1, target.to_string()));
                }
            }
        }
    }
    out
}

/// `base/relative` with `.` and `..` resolved lexically; None when it leaves the repository.
fn resolve(base: &Path, relative: &str) -> Option<PathBuf> {
    let mut parts: Vec<Component> = base.components().collect();
    for part in Path::new(relative).components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::Normal(_) => parts.push(part),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.iter().collect())
}

/// Whether a target leaves the repository's files: a URL or a mail address.
fn is_external(target: &str) -> bool {
    target.contains("://") || target.starts_with("mailto:")
}

/// Where a relative link of `file` points, relative to `root` (None: outside the repository).
fn target_file(file: &Path, path: &str) -> Option<PathBuf> {
    if path.is_empty() {
        return Some(file.to_path_buf());
    }
    resolve(file.parent().unwrap_or(Path::new("")), path)
}

/// Every broken relative link of `file` (relative to `root`), one line each.
fn broken_links(root: &Path, file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(root.join(file))
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
    let mut problems = Vec::new();
    for (line, target) in links(&text) {
        if is_external(&target) {
            continue;
        }
        let at = format!("{}:{line}: link `{target}`", file.display());
        if target.is_empty() {
            problems.push(format!("{at}: empty target"));
            continue;
        }
        let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
        let Some(linked) = target_file(file, path) else {
            problems.push(format!("{at}: leaves the repository"));
            continue;
        };
        let full = root.join(&linked);
        if !full.exists() {
            problems.push(format!("{at}: {} does not exist", linked.display()));
            continue;
        }
        if anchor.is_empty() {
            continue;
        }
        if linked.extension().is_some_and(|ext| ext == "md") {
            let found = file_anchors(&full);
            if !found.iter().any(|a| a == anchor) {
                problems.push(format!(
                    "{at}: {} has no heading #{anchor} (its anchors: {})",
                    linked.display(),
                    found.join(", ")
                ));
            }
        } else if !is_line_anchor(anchor) {
            problems.push(format!(
                "{at}: #{anchor} in {}, which is not Markdown",
                linked.display()
            ));
        }
    }
    problems
}

/// GitHub's line anchors of a source file: `L12` or `L12-L20`.
fn is_line_anchor(anchor: &str) -> bool {
    let line = |s: &str| {
        s.strip_prefix('L')
            .is_some_and(|n| n.parse::<u32>().is_ok())
    };
    match anchor.split_once('-') {
        Some((a, b)) => line(a) && line(b),
        None => line(anchor),
    }
}

#[test]
fn every_relative_link_names_a_file_and_a_heading_that_exist() {
    let root = root();
    let files = checked_files(root);
    assert!(
        files.len() > 3,
        "docs/ has no pages: {}",
        root.join("docs").display()
    );
    let problems: Vec<String> = files
        .iter()
        .flat_map(|file| broken_links(root, file))
        .collect();
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_readme_is_a_front_page_of_at_most_12_kib() {
    let size = std::fs::metadata(root().join("README.md")).unwrap().len() as usize;
    assert!(
        size <= FRONT_PAGE_LIMIT,
        "README.md has {size} bytes, more than {FRONT_PAGE_LIMIT}: move the detail to a page of docs/"
    );
}

#[test]
fn the_readme_links_to_every_page_of_docs() {
    let root = root();
    let readme = Path::new("README.md");
    let text = std::fs::read_to_string(root.join(readme)).unwrap();
    let linked: Vec<PathBuf> = links(&text)
        .into_iter()
        .filter(|(_, target)| !is_external(target))
        .filter_map(|(_, target)| {
            let path = target.split('#').next().unwrap_or("");
            target_file(readme, path)
        })
        .collect();
    let orphans: Vec<String> = doc_pages(root)
        .into_iter()
        .filter(|page| !linked.contains(page))
        .map(|page| page.display().to_string())
        .collect();
    assert!(
        orphans.is_empty(),
        "README.md links to none of: {}",
        orphans.join(", ")
    );
}

#[test]
fn slugs_follow_github() {
    assert_eq!(
        slug("fleet: parameter-server mode of Paddle >= 2"),
        "fleet-parameter-server-mode-of-paddle--2"
    );
    assert_eq!(
        slug("Workspace (when JOB_PATH is set)"),
        "workspace-when-job_path-is-set"
    );
    assert_eq!(
        slug("v1: paddle pserver / paddle train flags"),
        "v1-paddle-pserver--paddle-train-flags"
    );
    assert_eq!(
        slug("Under JobSet, Volcano, Kueue, LeaderWorkerSet and Kubeflow"),
        "under-jobset-volcano-kueue-leaderworkerset-and-kubeflow"
    );
}

/// The checker itself finds what it is there to find, and nothing in code.
#[test]
fn the_checker_reports_missing_files_and_headings() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir(root.join("docs")).unwrap();
    std::fs::write(
        root.join("docs/page.md"),
        "# A page\n\n## Twice\n\n## Twice\n\n### `code` and: punctuation!\n",
    )
    .unwrap();
    std::fs::write(root.join("notes.txt"), "text\n").unwrap();
    let readme = "\
# Front

```sh
# not a heading
echo '[in a fence](missing-in-fence.md)'
```

Fine: [page](docs/page.md), [second twice](docs/page.md#twice-1),
[code heading](docs/page.md#code-and-punctuation), [top](#front), [site](https://example.com/x.md),
[lines](notes.txt#L3-L5), and a `[span](missing-in-span.md)`.

Broken: [gone](docs/gone.md), [no heading](docs/page.md#nowhere), [in code](#not-a-heading),
[a link whose text
spans lines](docs/page.md#twice-2), [up](../outside.md).

[ref]: docs/also-gone.md
";
    std::fs::write(root.join("README.md"), readme).unwrap();
    let problems = broken_links(root, Path::new("README.md"));
    let targets: Vec<&str> = problems
        .iter()
        .map(|p| p.split('`').nth(1).unwrap())
        .collect();
    assert_eq!(
        targets,
        [
            "docs/gone.md",
            "docs/page.md#nowhere",
            "#not-a-heading",
            "docs/page.md#twice-2",
            "../outside.md",
            "docs/also-gone.md",
        ],
        "{problems:#?}"
    );
    assert!(problems[0].starts_with("README.md:12: "), "{}", problems[0]);
    assert!(problems[3].starts_with("README.md:14: "), "{}", problems[3]);
    assert!(problems[5].starts_with("README.md:16: "), "{}", problems[5]);
    assert!(broken_links(root, Path::new("docs/page.md")).is_empty());
}

/// One truth on Trainer v2 with `--max-restarts` (a recovering TrainJob, as `manifest`
/// generates it and tests/batch_manifests.rs validates it): the batch systems' page does not
/// list it among what Trainer refuses, and the manifests' recovery table has Trainer's row.
#[test]
fn trainer_v2_recovery_is_told_the_same_on_both_pages() {
    let read = |page: &str| std::fs::read_to_string(root().join("docs").join(page)).unwrap();
    let batch = read("batch-systems.md");
    let refused = batch
        .split("What Trainer cannot express is refused:")
        .nth(1)
        .and_then(|rest| rest.split('.').next())
        .expect("batch-systems.md says what Trainer refuses");
    assert!(
        !refused.contains("--max-restarts"),
        "batch-systems.md refuses --max-restarts under Trainer: {refused}"
    );
    assert!(batch.contains("`--max-restarts` works as under JobSet"));
    let manifests = read("manifests-and-rbac.md");
    assert!(
        manifests.contains("| `trainer` | the same, for the JobSet each TrainJob becomes"),
        "manifests-and-rbac.md has no Trainer row in its recovery table"
    );
}
