//! Which server binary runs, found once per process: [`SERVER_ENV`] if set,
//! else `valkey-server`, else `redis-server` on `PATH`, and its version (for
//! the flags that need 7.0+). Apart from the server so that the lookup's
//! rules, and their tests with fake binaries, stand on their own.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::{Error, ErrorKind, SERVER_ENV};

const NOT_FOUND: &str = "neither valkey-server nor redis-server is on PATH; install it: \
                         apt-get install redis-server (or run ./scripts/test, which does)";

/// The server binary and its version, found once per process.
#[derive(Debug, Clone)]
pub(crate) struct Binary {
    pub(crate) path: PathBuf,
    pub(crate) version: String,
}

pub(crate) fn binary() -> Result<Binary, Error> {
    static BINARY: OnceLock<Result<Binary, (ErrorKind, String)>> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            let path = locate(
                std::env::var_os(SERVER_ENV).as_deref(),
                std::env::var_os("PATH").as_deref(),
            )
            .map_err(|e| (e.kind, e.message))?;
            let version = version_of(&path).map_err(|e| (e.kind, e.message))?;
            Ok(Binary { path, version })
        })
        .clone()
        .map_err(|(kind, message)| Error { kind, message })
}

/// Picks the server binary: `override_path` if set and non-empty, else
/// `valkey-server`, else `redis-server` from `path_var`.
fn locate(override_path: Option<&OsStr>, path_var: Option<&OsStr>) -> Result<PathBuf, Error> {
    if let Some(path) = override_path.filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return if is_executable(&path) {
            Ok(path)
        } else {
            Err(Error::new(
                ErrorKind::BinaryNotFound,
                format!("{SERVER_ENV}={} is not an executable file", path.display()),
            ))
        };
    }
    let dirs: Vec<PathBuf> = path_var
        .map(|p| std::env::split_paths(p).collect())
        .unwrap_or_default();
    ["valkey-server", "redis-server"]
        .iter()
        .find_map(|name| {
            dirs.iter()
                .map(|dir| dir.join(name))
                .find(|candidate| is_executable(candidate))
        })
        .ok_or_else(|| Error::new(ErrorKind::BinaryNotFound, NOT_FOUND))
}

fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Runs `<binary> --version` and extracts `v=X.Y.Z` (the whole first line if
/// the output has another shape).
fn version_of(path: &Path) -> Result<String, Error> {
    let out = Command::new(path)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::io(format_args!("running {} --version", path.display()), e))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().next().unwrap_or("").trim();
    let version = line
        .split_whitespace()
        .find_map(|word| word.strip_prefix("v="))
        .unwrap_or(line);
    if version.is_empty() {
        return Err(Error::new(
            ErrorKind::Startup,
            format!(
                "{} --version printed nothing ({})",
                path.display(),
                out.status
            ),
        ));
    }
    Ok(version.to_owned())
}

pub(crate) fn major_version(version: &str) -> Option<u32> {
    version.split('.').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binary_names_the_debian_package() {
        let empty = tempfile::tempdir().unwrap();
        let err = locate(None, Some(empty.path().as_os_str())).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::BinaryNotFound);
        assert_eq!(
            err.to_string(),
            "neither valkey-server nor redis-server is on PATH; install it: \
             apt-get install redis-server (or run ./scripts/test, which does)"
        );
        let err = locate(None, None).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::BinaryNotFound);
    }

    #[test]
    fn valkey_is_preferred_over_redis() {
        let bin = tempfile::tempdir().unwrap();
        for name in ["redis-server", "valkey-server", "not-a-server"] {
            let path = bin.path().join(name);
            fs::write(&path, "#!/bin/sh\n").unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        }
        let found = locate(None, Some(bin.path().as_os_str())).unwrap();
        assert_eq!(found, bin.path().join("valkey-server"));

        fs::remove_file(bin.path().join("valkey-server")).unwrap();
        let found = locate(None, Some(bin.path().as_os_str())).unwrap();
        assert_eq!(found, bin.path().join("redis-server"));

        // A file without the execute bit does not count.
        fs::set_permissions(
            bin.path().join("redis-server"),
            fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        assert!(locate(None, Some(bin.path().as_os_str())).is_err());
    }

    #[test]
    fn override_must_be_executable() {
        let err = locate(Some(OsStr::new("/nonexistent/valkey-server")), None).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::BinaryNotFound);
        assert!(err.to_string().contains(SERVER_ENV), "{err}");
    }

    #[test]
    fn parses_versions() {
        assert_eq!(major_version("7.0.15"), Some(7));
        assert_eq!(major_version("255.255.255"), Some(255));
        assert_eq!(major_version("unknown"), None);
    }
}
