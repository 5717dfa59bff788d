//! Where the settings files live.

use std::env;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Environment variable that overrides the config directory (tests, portable installs).
pub const CONFIG_DIR_ENV: &str = "COMPACTD_CONFIG_DIR";

/// File name of the user and project settings files.
pub const SETTINGS_FILE_NAME: &str = "settings.json";

/// compactd's config directory: `$COMPACTD_CONFIG_DIR` when set and non-empty, else the
/// platform's (e.g. `~/.config/compactd` on Linux). `None` when the platform has no home.
pub fn config_dir() -> Option<PathBuf> {
    config_dir_from(env::var_os(CONFIG_DIR_ENV))
}

fn config_dir_from(override_dir: Option<OsString>) -> Option<PathBuf> {
    match override_dir.filter(|dir| !dir.is_empty()) {
        Some(dir) => Some(PathBuf::from(dir)),
        None => directories::ProjectDirs::from("", "", "compactd")
            .map(|dirs| dirs.config_dir().to_path_buf()),
    }
}

/// The user settings file, `<config dir>/settings.json`.
pub fn user_settings_file() -> Option<PathBuf> {
    config_dir().map(|dir| dir.join(SETTINGS_FILE_NAME))
}

/// The project settings file of a session's working directory, `<cwd>/.compactd/settings.json`.
pub fn project_settings_file(cwd: &Path) -> PathBuf {
    cwd.join(".compactd").join(SETTINGS_FILE_NAME)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_overrides_the_config_dir() {
        let dir = config_dir_from(Some("/tmp/compactd-test".into()));
        assert_eq!(dir, Some(PathBuf::from("/tmp/compactd-test")));
        // An empty override is ignored rather than meaning the current directory.
        assert_ne!(config_dir_from(Some("".into())), Some(PathBuf::new()));
    }

    #[test]
    fn the_project_file_sits_in_dot_compactd() {
        assert_eq!(
            project_settings_file(Path::new("/work/p")),
            PathBuf::from("/work/p/.compactd/settings.json")
        );
    }
}
