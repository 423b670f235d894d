//! Where the registry lives, and the checks that make it safe to trust.
//!
//! The directory holds records that later decide which processes get signalled, so
//! it must be ours alone: created 0700, never a symlink, never owned by someone else.

use super::RegistryError;
use std::path::{Path, PathBuf};

/// A state directory that passed the checks.
#[derive(Debug, Clone)]
pub struct StateDir {
    path: PathBuf,
}

/// Where the state directory path came from: an explicit choice is held to it, a
/// default may be skipped with a warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// `--state-dir` or `$UNDERTAKER_STATE_DIR`.
    Explicit,
    /// `$XDG_STATE_HOME/undertaker` or `~/.local/state/undertaker`.
    Default,
}

/// Resolves the state directory path: `explicit`, else `$UNDERTAKER_STATE_DIR`, else
/// `$XDG_STATE_HOME/undertaker`, else `$HOME/.local/state/undertaker`; on Windows
/// `%LOCALAPPDATA%\undertaker` after the first two.
pub fn resolve(explicit: Option<&Path>) -> Result<(PathBuf, Origin), RegistryError> {
    resolve_with(explicit, |k| std::env::var_os(k))
}

fn resolve_with(
    explicit: Option<&Path>,
    env: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Result<(PathBuf, Origin), RegistryError> {
    let nonempty = |k: &str| env(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(p) = explicit {
        return Ok((p.to_path_buf(), Origin::Explicit));
    }
    if let Some(p) = nonempty("UNDERTAKER_STATE_DIR") {
        return Ok((p, Origin::Explicit));
    }
    if cfg!(windows) {
        return nonempty("LOCALAPPDATA")
            .filter(|p| p.is_absolute())
            .map(|p| (p.join("undertaker"), Origin::Default))
            .ok_or(RegistryError::NoStateDir);
    }
    if let Some(p) = nonempty("XDG_STATE_HOME").filter(|p| p.is_absolute()) {
        return Ok((p.join("undertaker"), Origin::Default));
    }
    if let Some(home) = nonempty("HOME") {
        return Ok((home.join(".local/state/undertaker"), Origin::Default));
    }
    Err(RegistryError::NoStateDir)
}

/// [`resolve`] then [`StateDir::prepare`]: the state directory a command uses, and
/// where its path came from; an error says where too, because an explicitly chosen
/// directory is held to it (see [`for_recording`]).
pub fn resolve_and_prepare(
    explicit: Option<&Path>,
    uid: u32,
) -> Result<(StateDir, Origin), (Origin, RegistryError)> {
    let (path, origin) = resolve(explicit).map_err(|e| (Origin::Default, e))?;
    let dir = StateDir::prepare(&path, uid).map_err(|e| (origin, e))?;
    Ok((dir, origin))
}

/// The recorder's rule, on every platform: coverage beats bookkeeping, so a guardian
/// whose state directory cannot be used only loses the record of `tree` (`Ok(None)`,
/// with a warning), except when the directory was chosen explicitly and is unsafe:
/// that stops it, as a usage error.
pub fn for_recording(
    explicit: Option<&Path>,
    uid: u32,
    tree: &str,
) -> Result<Option<StateDir>, crate::RunError> {
    match resolve_and_prepare(explicit, uid) {
        Ok((dir, _)) => Ok(Some(dir)),
        Err((Origin::Explicit, e @ RegistryError::UnsafeStateDir { .. })) => {
            Err(crate::RunError::Usage(e.to_string()))
        }
        Err((_, e)) => {
            tracing::warn!("not recording tree {tree}: {e}");
            Ok(None)
        }
    }
}

impl StateDir {
    /// Creates `path` (0700) if missing, then refuses a symlink, a non-directory, or a
    /// directory not owned by `uid` or writable by others; the same for `trees/`.
    pub fn prepare(path: &Path, uid: u32) -> Result<Self, RegistryError> {
        // "link/" and "link/." name the directory a symlink points to, and every
        // check below would pass on that directory: judge "link" itself.
        let normalized: PathBuf = path.components().collect();
        let path = normalized.as_path();
        let unsafe_dir = |why: String| RegistryError::UnsafeStateDir {
            path: path.to_path_buf(),
            why,
        };
        match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                create_private(path).map_err(|e| RegistryError::Io {
                    path: path.to_path_buf(),
                    msg: e.to_string(),
                })?;
                check_private(path, uid).map_err(unsafe_dir)?;
            }
            Err(e) => {
                return Err(RegistryError::Io {
                    path: path.to_path_buf(),
                    msg: e.to_string(),
                })
            }
            Ok(meta) => judge_private(&meta, uid).map_err(unsafe_dir)?,
        }
        let dir = Self {
            path: path.to_path_buf(),
        };
        // Every directory of the state dir gets the state dir's checks: records in a
        // `trees/` another user can write (a symlink to /tmp, mode 777) would decide
        // what we signal.
        private_subdir(dir.trees_dir(), uid)?;
        Ok(dir)
    }

    pub fn db_path(&self) -> PathBuf {
        self.path.join("registry.db")
    }

    /// Serialises recovery from a corrupt database between processes.
    pub fn recovery_lock_path(&self) -> PathBuf {
        self.path.join("registry.lock")
    }

    /// Holds one record file per tree not yet folded (see [`super::record_file`]).
    pub fn trees_dir(&self) -> PathBuf {
        self.path.join("trees")
    }

    /// Holds the control socket of each live supervisor (docs/SUPERVISE.md), created
    /// when missing with the state dir's checks: no other uid may put a socket there.
    pub fn control_dir(&self, uid: u32) -> Result<PathBuf, RegistryError> {
        let control = self.path.join("control");
        private_subdir(control.clone(), uid)?;
        Ok(control)
    }
}

/// Creates `sub` (0700) when missing, then gives it the state dir's checks.
fn private_subdir(sub: PathBuf, uid: u32) -> Result<(), RegistryError> {
    let unsafe_dir = |why| RegistryError::UnsafeStateDir {
        path: sub.clone(),
        why,
    };
    // Judged as found: one look when it is there, as on every start but the first.
    if let Ok(meta) = std::fs::symlink_metadata(&sub) {
        return judge_private(&meta, uid).map_err(unsafe_dir);
    }
    if let Err(e) = create_private(&sub) {
        // Something is in its place: the checks say what.
        if std::fs::symlink_metadata(&sub).is_err() {
            return Err(RegistryError::Io {
                path: sub,
                msg: e.to_string(),
            });
        }
    }
    check_private(&sub, uid).map_err(unsafe_dir)
}

/// Refuses a symlink, a non-directory, a directory not owned by `uid`, or one others
/// may write; `Err` says why.
fn check_private(path: &Path, uid: u32) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| e.to_string())?;
    judge_private(&meta, uid)
}

/// [`check_private`] of what `lstat` found.
fn judge_private(meta: &std::fs::Metadata, uid: u32) -> Result<(), String> {
    if meta.file_type().is_symlink() {
        return Err("it is a symlink".into());
    }
    if !meta.is_dir() {
        return Err("it is not a directory".into());
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if meta.uid() != uid {
            return Err(format!("it is owned by uid {}, not {uid}", meta.uid()));
        }
        if meta.mode() & 0o022 != 0 {
            return Err(format!(
                "it is writable by others (mode {:o})",
                meta.mode() & 0o7777
            ));
        }
    }
    #[cfg(not(unix))]
    let _ = uid;
    Ok(())
}

fn create_private(path: &Path) -> std::io::Result<()> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    b.create(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[cfg(windows)]
    #[test]
    fn resolution_order_on_windows() {
        let all = [
            ("UNDERTAKER_STATE_DIR", r"C:\s"),
            ("LOCALAPPDATA", r"C:\l"),
            ("HOME", r"C:\h"),
        ];
        let got = resolve_with(None, env(&all)).unwrap();
        assert_eq!(got, (PathBuf::from(r"C:\s"), Origin::Explicit));
        let got = resolve_with(None, env(&all[1..])).unwrap();
        assert_eq!(got, (PathBuf::from(r"C:\l\undertaker"), Origin::Default));
        // Neither HOME nor XDG_STATE_HOME is a Windows default.
        assert!(resolve_with(None, env(&all[2..])).is_err());
    }

    #[cfg(unix)]
    #[test]
    fn resolution_order() {
        let all = [
            ("UNDERTAKER_STATE_DIR", "/s"),
            ("XDG_STATE_HOME", "/x"),
            ("HOME", "/h"),
        ];
        let got = resolve_with(Some(Path::new("/e")), env(&all)).unwrap();
        assert_eq!(got, (PathBuf::from("/e"), Origin::Explicit));
        let got = resolve_with(None, env(&all)).unwrap();
        assert_eq!(got, (PathBuf::from("/s"), Origin::Explicit));
        let got = resolve_with(None, env(&all[1..])).unwrap();
        assert_eq!(got, (PathBuf::from("/x/undertaker"), Origin::Default));
        // A relative XDG_STATE_HOME is invalid per the spec and ignored.
        let got = resolve_with(None, env(&[("XDG_STATE_HOME", "rel"), ("HOME", "/h")])).unwrap();
        assert_eq!(
            got,
            (PathBuf::from("/h/.local/state/undertaker"), Origin::Default)
        );
        assert!(resolve_with(None, env(&[])).is_err());
    }

    #[cfg(unix)]
    #[test]
    fn trailing_slashes_do_not_hide_a_symlink() {
        let base = std::env::temp_dir().join(format!("ut-sd-{}", std::process::id()));
        let real = base.join("real");
        create_private(&real).unwrap();
        let link = base.join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let uid = rustix::process::getuid().as_raw();
        for spelled in ["link", "link/", "link//", "link/."] {
            let got = StateDir::prepare(&base.join(spelled), uid);
            assert!(
                matches!(got, Err(RegistryError::UnsafeStateDir { .. })),
                "{spelled}: {got:?}"
            );
        }
        assert!(StateDir::prepare(&base.join("real/"), uid).is_ok());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn trees_dir_gets_the_state_dirs_checks() {
        use std::os::unix::fs::PermissionsExt;
        let base = std::env::temp_dir().join(format!("ut-sdt-{}", std::process::id()));
        let open = base.join("open");
        std::fs::create_dir_all(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let uid = rustix::process::getuid().as_raw();
        let refused = |state: &Path| {
            let got = StateDir::prepare(state, uid);
            assert!(
                matches!(&got, Err(RegistryError::UnsafeStateDir { path, .. }) if path.ends_with("trees")),
                "{}: {got:?}",
                state.display()
            );
        };
        // trees/ a symlink to a directory anyone may write.
        let linked = base.join("linked");
        create_private(&linked).unwrap();
        std::os::unix::fs::symlink(&open, linked.join("trees")).unwrap();
        refused(&linked);
        // trees/ writable by others.
        let loose = base.join("loose");
        create_private(&loose.join("trees")).unwrap();
        std::fs::set_permissions(loose.join("trees"), std::fs::Permissions::from_mode(0o777))
            .unwrap();
        refused(&loose);
        // trees/ a file.
        let file = base.join("file");
        create_private(&file).unwrap();
        std::fs::write(file.join("trees"), b"").unwrap();
        refused(&file);
        assert!(StateDir::prepare(&base.join("fine"), uid).is_ok());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
