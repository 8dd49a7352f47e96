//! The folders a run writes into, made before the simulation and taken back if it fails.
//!
//! Place in the flow: the command line ([`crate::cli`]) makes the report's folder and the
//! log's before minutes of simulation, so a path that cannot be used is refused at once. A run
//! that fails afterwards (a workload the fairshare run alone would refuse, an audit that finds
//! divergences) leaves no empty folder of its own making behind.

use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, bail};

/// A folder made for this run, with the parents it had to make. If the run fails before
/// anything is written there, dropping it removes again, innermost first, the folders this
/// run made and that are still empty; a folder that was there before is never removed.
pub struct NewFolder {
    /// The folders this run made, innermost first, while nothing was written in them.
    made: Vec<PathBuf>,
}

impl NewFolder {
    /// Makes `path` and any missing parents. Only a folder that this call itself created is
    /// recorded: each is made on its own, top down, so a path through `..`, or another run
    /// making the same folder at the same moment, never makes a folder that was there count
    /// as new.
    pub fn create(path: &Path) -> anyhow::Result<Self> {
        let mut folder = NewFolder { made: Vec::new() };
        let mut wanted: Vec<&Path> = path
            .ancestors()
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
        wanted.reverse();
        for dir in wanted {
            match std::fs::create_dir(dir) {
                Ok(()) => folder.made.insert(0, dir.to_path_buf()),
                Err(e) if e.kind() == ErrorKind::AlreadyExists && dir.is_dir() => {}
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                    bail!(
                        "cannot create {}: {} is a file, not a folder",
                        path.display(),
                        dir.display()
                    );
                }
                // Dropping `folder` takes back what this call made before the error.
                Err(e) => {
                    return Err(e).with_context(|| format!("cannot create {}", path.display()));
                }
            }
        }
        Ok(folder)
    }

    /// Something of the run is in it: it stays whatever happens next.
    pub fn keep(&mut self) {
        self.made.clear();
    }
}

impl Drop for NewFolder {
    fn drop(&mut self) {
        for path in self.made.drain(..) {
            // `remove_dir` removes only an empty folder: anything written there stays, and
            // so do the folders above it.
            if std::fs::remove_dir(path).is_err() {
                break;
            }
        }
    }
}

/// Refuses `path` for a file the run writes at its end (the log, the tenant map; `flag`
/// names it) before the simulation, rather than after it: a folder, or a file that cannot be
/// created or written. Its folder is made, and taken back if the run fails
/// before the file is written ([`NewFolder`]); a file made only to check is removed again, and
/// an existing one is left as it is until the run writes it.
pub fn check_writable(flag: &str, path: &Path) -> anyhow::Result<NewFolder> {
    if path.is_dir() {
        bail!("{flag} {} is a folder: give a file name", path.display());
    }
    let folder = match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) => NewFolder::create(dir)?,
        None => NewFolder { made: Vec::new() },
    };
    // Something already there (a file, or a link, even one to nothing yet) is left as it is
    // and written through at the end; only a file this check creates is removed again.
    match path.symlink_metadata() {
        Ok(m) if m.file_type().is_symlink() => return Ok(folder),
        Ok(_) => {
            std::fs::OpenOptions::new()
                .append(true)
                .open(path)
                .with_context(|| format!("cannot write {}", path.display()))?;
            return Ok(folder);
        }
        Err(_) => {}
    }
    std::fs::OpenOptions::new()
        .append(true)
        .create_new(true)
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    // Nothing written yet: no empty log is left behind if the run fails.
    std::fs::remove_file(path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(folder)
}

/// Where `path` is on disk: its longest part that exists, links followed, then the rest as
/// written, `..` taking off the folder before it (those folders are the run's to make, so no
/// link is in the way). Paths with one place name one file.
fn place(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let parts: Vec<Component<'_>> = absolute.components().collect();
    for known in (0..=parts.len()).rev() {
        let Ok(mut at) = std::fs::canonicalize(parts[..known].iter().collect::<PathBuf>()) else {
            continue;
        };
        for part in &parts[known..] {
            match part {
                Component::ParentDir => {
                    at.pop();
                }
                Component::CurDir => {}
                other => at.push(other),
            }
        }
        return at;
    }
    absolute
}

/// Refuses, before the simulation, a run that would write over a file it reads or write two
/// of its files to one place: `--log trace.csv` would replace the trace with the log, and
/// `--log out/report.md` would have the report replace the log. `inputs` and `outputs` are
/// `(flag, path)` pairs, named as the user gave them.
pub fn refuse_overlaps(inputs: &[(&str, &Path)], outputs: &[(&str, &Path)]) -> anyhow::Result<()> {
    let inputs: Vec<(&str, &Path, PathBuf)> =
        inputs.iter().map(|&(f, p)| (f, p, place(p))).collect();
    let outputs: Vec<(&str, &Path, PathBuf)> =
        outputs.iter().map(|&(f, p)| (f, p, place(p))).collect();
    for (i, (flag, path, at)) in outputs.iter().enumerate() {
        if let Some((read_by, read, _)) = inputs.iter().find(|(_, _, p)| p == at) {
            bail!(
                "{flag} {} is the file {read_by} {} reads: the run would write over its own \
                 input; give another path",
                path.display(),
                read.display()
            );
        }
        if let Some((other, other_path, _)) = outputs[..i].iter().find(|(_, _, p)| p == at) {
            bail!(
                "{other} {} and {flag} {} are one file: one would write over the other; give \
                 them different paths",
                other_path.display(),
                path.display()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_folders_a_run_made_are_taken_back() {
        let dir = tempfile::tempdir().unwrap();
        let before = dir.path().join("before");
        std::fs::create_dir(&before).unwrap();
        // Through a new folder and back up to one that was there: only the new one goes.
        let through = dir.path().join("new").join("..").join("before");
        drop(NewFolder::create(&through).unwrap());
        assert!(before.is_dir(), "a folder that was there stays");
        assert!(
            !dir.path().join("new").exists(),
            "the one made on the way went"
        );
        // New folders inside one that was there go, innermost first, up to it.
        let deep = before.join("a").join("b");
        drop(NewFolder::create(&deep).unwrap());
        assert!(!before.join("a").exists());
        assert!(before.is_dir());
    }

    #[test]
    fn a_folder_with_something_in_it_or_kept_stays() {
        let dir = tempfile::tempdir().unwrap();
        let written = dir.path().join("w").join("x");
        let folder = NewFolder::create(&written).unwrap();
        std::fs::write(written.join("run.log"), b"log").unwrap();
        drop(folder);
        assert!(written.join("run.log").is_file(), "what was written stays");
        let kept = dir.path().join("k");
        let mut folder = NewFolder::create(&kept).unwrap();
        folder.keep();
        drop(folder);
        assert!(kept.is_dir(), "a kept folder stays, empty or not");
    }

    #[test]
    fn a_log_path_is_checked_and_its_folder_taken_back() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("logs").join("run.log");
        let folder = check_writable("--log", &log).unwrap();
        assert!(dir.path().join("logs").is_dir());
        assert!(!log.exists(), "no empty log is made");
        drop(folder);
        assert!(!dir.path().join("logs").exists());
        let err = check_writable("--log", dir.path())
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("is a folder"), "{err}");
        // A file where a folder should be: refused, and nothing of this call stays.
        let file = dir.path().join("file");
        std::fs::write(&file, b"").unwrap();
        let err = check_writable("--log", &file.join("sub").join("run.log"))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("file is a file, not a folder"), "{err}");
        assert!(file.is_file());
    }
}
