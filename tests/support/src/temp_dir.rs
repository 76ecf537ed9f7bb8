use std::path::{Path, PathBuf};

/// A fresh directory under the system's temporary directory, named after
/// the test and unique to this call, removed with everything in it when
/// dropped (pass or fail).
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// `<tmp>/fluxio-tests/<namespace(test)>`.
    ///
    /// # Panics
    /// When the directory cannot be created.
    #[must_use]
    pub fn new(test: &str) -> Self {
        let dir = std::env::temp_dir()
            .join("fluxio-tests")
            .join(crate::namespace(test));
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        TempDir(dir)
    }

    /// The directory.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// `<dir>/<name>.db`.
    #[must_use]
    pub fn db(&self, name: &str) -> PathBuf {
        self.0.join(format!("{name}.db"))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
