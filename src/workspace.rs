//! Directories and copies the plan asks for, done before the launch.

use std::fs;
use std::io;
use std::path::Path;

use tracing::{info, warn};

use crate::error::Error;
use crate::plan::Plan;

pub fn prepare(plan: &Plan) -> Result<(), Error> {
    let fail = |what: String, e: io::Error| Error::io(what, e);
    for process in &plan.processes {
        fs::create_dir_all(&process.cwd).map_err(|e| {
            fail(
                format!("cannot create the work directory {}", process.cwd.display()),
                e,
            )
        })?;
        if let Some(dir) = process.log.as_ref().and_then(|l| l.parent()) {
            fs::create_dir_all(dir).map_err(|e| {
                fail(
                    format!("cannot create the log directory {}", dir.display()),
                    e,
                )
            })?;
        }
    }
    for file in &plan.files {
        let written = file
            .path
            .parent()
            .map_or(Ok(()), fs::create_dir_all)
            .and_then(|_| fs::write(&file.path, &file.content));
        match written {
            Ok(()) => info!("wrote {}", file.path.display()),
            Err(e) if file.required => {
                return Err(fail(format!("cannot write {}", file.path.display()), e))
            }
            // The id files are a convenience of the seeds' programs: most do not read them.
            Err(e) => warn!(
                "cannot write {}: {e} (set PADDLE_LAUNCHER_ID_DIR to a writable directory)",
                file.path.display()
            ),
        }
    }
    for copy in &plan.copies {
        if !copy.from.is_dir() {
            info!("{} does not exist: nothing to copy", copy.from.display());
            continue;
        }
        let files = copy_contents(&copy.from, &copy.to).map_err(|e| {
            fail(
                format!(
                    "cannot copy {} to {}",
                    copy.from.display(),
                    copy.to.display()
                ),
                e,
            )
        })?;
        info!(
            "copied {files} files from {} to {}",
            copy.from.display(),
            copy.to.display()
        );
    }
    Ok(())
}

/// Copies the contents of `from` into `to` recursively; returns the number of files.
pub fn copy_contents(from: &Path, to: &Path) -> io::Result<usize> {
    fs::create_dir_all(to)?;
    let mut files = 0;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            files += copy_contents(&entry.path(), &target)?;
        } else {
            fs::copy(entry.path(), &target)?;
            files += 1;
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    #[test]
    fn copies_nested_directories() {
        let src = tempfile::tempdir().unwrap();
        let dst = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(src.path().join("a/b")).unwrap();
        std::fs::write(src.path().join("a/b/part-0"), "x").unwrap();
        std::fs::write(src.path().join("top"), "y").unwrap();
        let n = super::copy_contents(src.path(), &dst.path().join("data")).unwrap();
        assert_eq!(n, 2);
        assert_eq!(
            std::fs::read_to_string(dst.path().join("data/a/b/part-0")).unwrap(),
            "x"
        );
    }
}
