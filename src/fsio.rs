//! Files the tool writes: atomically (a temporary file in the same folder, then a rename, so a
//! crash or a concurrent reader never sees a torn file) and never over one of the files it read.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Why a file could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("{}: refusing to overwrite {what} `{}` with the output", path.display(), input.display())]
    WouldOverwriteInput {
        path: PathBuf,
        input: PathBuf,
        what: String,
    },
    // The cause is part of the message and deliberately not a `source`: anyhow's `{:#}` would
    // print it a second time.
    #[error("{}: {cause}", path.display())]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
}

/// Refuses `output` when it names the same file as any of `inputs` (after resolving symlinks and
/// `..`), so `analyze M.onnx -o M.onnx` cannot replace the model with its report.
/// `what` names the protected inputs in the message ("the model", "an input tensor").
pub fn ensure_not_an_input(output: &Path, inputs: &[&Path], what: &str) -> Result<(), WriteError> {
    let Some(target) = resolve_for_compare(output) else {
        return Ok(());
    };
    for input in inputs {
        if let Some(source) = resolve_for_compare(input) {
            if source == target {
                return Err(WriteError::WouldOverwriteInput {
                    path: output.to_path_buf(),
                    input: input.to_path_buf(),
                    what: what.to_string(),
                });
            }
        }
    }
    Ok(())
}

/// Canonical form of a path that may not exist yet: the canonical parent joined with the name.
fn resolve_for_compare(path: &Path) -> Option<PathBuf> {
    if let Ok(canonical) = std::fs::canonicalize(path) {
        return Some(canonical);
    }
    let name = path.file_name()?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Some(std::fs::canonicalize(parent).ok()?.join(name))
}

/// Writes `bytes` to `path` through a temporary file in the same folder and a rename. The
/// temporary file is removed when anything fails.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    let io = |cause| WriteError::Io {
        path: path.to_path_buf(),
        cause,
    };
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path.file_name().ok_or_else(|| {
        io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a file name",
        ))
    })?;
    if path.is_dir() {
        return Err(io(std::io::Error::new(
            std::io::ErrorKind::IsADirectory,
            "is a directory",
        )));
    }
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(name);
    temp_name.push(format!(".{}.tmp", std::process::id()));
    let temp = parent.join(temp_name);
    let result = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&temp, path)
    })();
    if let Err(err) = result {
        let _ = std::fs::remove_file(&temp);
        return Err(io(err));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("roofline-fsio-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn same_file_through_dot_dot_and_symlink_is_refused() {
        let dir = scratch("same");
        let model = dir.join("m.onnx");
        std::fs::write(&model, b"model").unwrap();
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        let via_dotdot = dir.join("sub/../m.onnx");
        assert!(ensure_not_an_input(&via_dotdot, &[&model], "the model").is_err());
        let link = dir.join("link.onnx");
        std::os::unix::fs::symlink(&model, &link).unwrap();
        assert!(ensure_not_an_input(&link, &[&model], "the model").is_err());
        assert!(ensure_not_an_input(&dir.join("report.json"), &[&model], "the model").is_ok());
    }

    #[test]
    fn atomic_write_replaces_whole_file_and_leaves_no_temporary() {
        let dir = scratch("atomic");
        let path = dir.join("out.json");
        std::fs::write(&path, b"old contents that are longer").unwrap();
        write_atomic(&path, b"new").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty());
        assert!(
            write_atomic(&dir, b"x").is_err(),
            "a directory is not replaced"
        );
        assert!(write_atomic(&dir.join("missing/out.json"), b"x").is_err());
    }
}
