//! The JIT configuration: decoding the `encoded_jit_config` blob minted by the fake GitHub
//! (FAKE_PROTOCOL.md), validating its shape, and writing/reading/removing the three files the
//! real runner keeps in its root.
//!
//! Everything secret (the blob, the runner token, the RSA parameters) lives in [`Secret`], whose
//! `Debug`/`Display` never show the value, and error text never quotes input, so a bad blob
//! cannot leak through an error message.

use std::fmt;
use std::path::Path;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde_json::Value;

/// The files a JIT blob carries, in the order the real runner writes them.
pub const CONFIG_FILES: [&str; 3] = [RUNNER_FILE, CREDENTIALS_FILE, RSA_FILE];
const RUNNER_FILE: &str = ".runner";
const CREDENTIALS_FILE: &str = ".credentials";
const RSA_FILE: &str = ".credentials_rsaparams";
const RSA_KEYS: [&str; 8] = ["d", "dp", "dq", "exponent", "inverseQ", "modulus", "p", "q"];

/// A value that must never be printed: `Debug` and `Display` say `[redacted]`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The raw value, for the one place that needs it (an HTTP header, a file).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// Why a configuration was refused. The text names what is wrong, never the value.
#[derive(Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// The blob does not decode to the JIT shape; the string says which part is wrong.
    InvalidJitConfig(&'static str),
    /// No blob given and no configuration files in the runner root.
    NotConfigured,
    /// The configuration files could not be read or written.
    Io(String),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidJitConfig(why) => {
                write!(f, "Invalid configuration provided for jitconfig ({why})")
            }
            Self::NotConfigured => f.write_str(
                "Not configured. This fake runner only supports JIT configuration: \
                 run `Runner.Listener run --jitconfig <blob>` or set ACTIONS_RUNNER_INPUT_JITCONFIG.",
            ),
            Self::Io(msg) => write!(f, "Cannot access the runner configuration files: {msg}"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// The parts of `.runner` the listener uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerSettings {
    pub agent_id: u64,
    pub agent_name: String,
    pub pool_id: u64,
    /// Broker base URL, e.g. `http://127.0.0.1:1234/_broker/`.
    pub server_url: String,
    pub github_url: String,
    pub work_folder: String,
    pub ephemeral: bool,
}

/// A validated configuration: the parsed settings, the runner secret and the raw file bytes to
/// write into the runner root.
#[derive(Debug)]
pub struct RunnerConfig {
    pub settings: RunnerSettings,
    pub token: Secret,
    runner_file: Vec<u8>,
    /// `.credentials` and `.credentials_rsaparams` hold secrets; kept as [`Secret`] text.
    credentials_file: Secret,
    rsa_file: Secret,
}

impl RunnerConfig {
    /// Decodes an `encoded_jit_config` blob (base64 of a JSON object of base64 file contents).
    pub fn from_jit_blob(blob: &Secret) -> Result<Self, ConfigError> {
        let outer = STANDARD
            .decode(blob.expose().trim())
            .map_err(|_| ConfigError::InvalidJitConfig("the blob is not base64"))?;
        let map: serde_json::Map<String, Value> = serde_json::from_slice(&outer)
            .map_err(|_| ConfigError::InvalidJitConfig("the blob is not a JSON object"))?;
        let file = |name: &'static str, missing: &'static str| -> Result<Vec<u8>, ConfigError> {
            let encoded = map
                .get(name)
                .and_then(Value::as_str)
                .ok_or(ConfigError::InvalidJitConfig(missing))?;
            STANDARD
                .decode(encoded)
                .map_err(|_| ConfigError::InvalidJitConfig("a file in the blob is not base64"))
        };
        let runner = file(RUNNER_FILE, "the blob has no .runner file")?;
        let credentials = file(CREDENTIALS_FILE, "the blob has no .credentials file")?;
        let rsa = file(RSA_FILE, "the blob has no .credentials_rsaparams file")?;
        Self::from_files(runner, credentials, rsa)
    }

    /// Loads a configuration previously written into `root` (a restart after exit code 2).
    pub fn load(root: &Path) -> Result<Self, ConfigError> {
        let read = |name: &str| -> Result<Option<Vec<u8>>, ConfigError> {
            match std::fs::read(root.join(name)) {
                Ok(bytes) => Ok(Some(bytes)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(ConfigError::Io(format!("{name}: {e}"))),
            }
        };
        match (read(RUNNER_FILE)?, read(CREDENTIALS_FILE)?, read(RSA_FILE)?) {
            (Some(runner), Some(credentials), Some(rsa)) => {
                Self::from_files(runner, credentials, rsa)
            }
            _ => Err(ConfigError::NotConfigured),
        }
    }

    fn from_files(
        runner: Vec<u8>,
        credentials: Vec<u8>,
        rsa: Vec<u8>,
    ) -> Result<Self, ConfigError> {
        let settings = parse_runner(&runner)?;
        let credentials = String::from_utf8(credentials)
            .map(Secret)
            .map_err(|_| ConfigError::InvalidJitConfig(".credentials is not text"))?;
        let token = parse_credentials(&credentials)?;
        let rsa = String::from_utf8(rsa)
            .map(Secret)
            .map_err(|_| ConfigError::InvalidJitConfig(".credentials_rsaparams is not text"))?;
        check_rsa(&rsa)?;
        Ok(Self {
            settings,
            token,
            runner_file: runner,
            credentials_file: credentials,
            rsa_file: rsa,
        })
    }

    /// Writes `.runner`, `.credentials` and `.credentials_rsaparams` into `root`
    /// (secrets with mode 600, as they would be readable by the runner user only).
    pub fn write(&self, root: &Path) -> Result<(), ConfigError> {
        write_file(&root.join(RUNNER_FILE), &self.runner_file, 0o644)?;
        write_file(
            &root.join(CREDENTIALS_FILE),
            self.credentials_file.expose().as_bytes(),
            0o600,
        )?;
        write_file(
            &root.join(RSA_FILE),
            self.rsa_file.expose().as_bytes(),
            0o600,
        )
    }
}

/// Removes the local configuration files (after the one job); returns the names removed.
pub fn remove_files(root: &Path) -> Vec<&'static str> {
    CONFIG_FILES
        .into_iter()
        .filter(|name| std::fs::remove_file(root.join(name)).is_ok())
        .collect()
}

fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), ConfigError> {
    let io = |e: std::io::Error| ConfigError::Io(format!("{}: {e}", path.display()));
    std::fs::write(path, bytes).map_err(io)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io)?;
    }
    #[cfg(not(unix))]
    let _ = mode;
    Ok(())
}

fn parse_runner(bytes: &[u8]) -> Result<RunnerSettings, ConfigError> {
    let bad = ConfigError::InvalidJitConfig;
    let v: Value = serde_json::from_slice(bytes).map_err(|_| bad(".runner is not JSON"))?;
    let text = |key: &str| v.get(key).and_then(Value::as_str).map(str::to_owned);
    let agent_id = v
        .get("AgentId")
        .and_then(Value::as_u64)
        .ok_or(bad(".runner has no integer AgentId"))?;
    let agent_name = text("AgentName")
        .filter(|n| !n.is_empty())
        .ok_or(bad(".runner has no AgentName"))?;
    let server_url = text("ServerUrl")
        .filter(|u| u.starts_with("http://") || u.starts_with("https://"))
        .ok_or(bad(".runner has no http(s) ServerUrl"))?;
    let github_url = text("GitHubUrl").ok_or(bad(".runner has no GitHubUrl"))?;
    Ok(RunnerSettings {
        agent_id,
        agent_name,
        pool_id: v.get("PoolId").and_then(Value::as_u64).unwrap_or(1),
        server_url,
        github_url,
        work_folder: text("WorkFolder")
            .filter(|w| !w.is_empty())
            .unwrap_or_else(|| "_work".to_owned()),
        ephemeral: v.get("Ephemeral").and_then(Value::as_bool).unwrap_or(true),
    })
}

fn parse_credentials(text: &Secret) -> Result<Secret, ConfigError> {
    let bad = ConfigError::InvalidJitConfig;
    let v: Value =
        serde_json::from_str(text.expose()).map_err(|_| bad(".credentials is not JSON"))?;
    if v.get("Scheme").and_then(Value::as_str) != Some("OAuthAccessToken") {
        return Err(bad(".credentials is not an OAuthAccessToken credential"));
    }
    v.get("Data")
        .and_then(|d| d.get("token"))
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .map(Secret::new)
        .ok_or(bad(".credentials has no token"))
}

fn check_rsa(text: &Secret) -> Result<(), ConfigError> {
    let bad = ConfigError::InvalidJitConfig;
    let v: Value = serde_json::from_str(text.expose())
        .map_err(|_| bad(".credentials_rsaparams is not JSON"))?;
    if RSA_KEYS
        .iter()
        .all(|k| v.get(k).and_then(Value::as_str).is_some())
    {
        Ok(())
    } else {
        Err(bad(".credentials_rsaparams lacks RSA parameters"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TOKEN: &str = "s3cr3t-token-0123456789abcdefghijklmnopq";

    fn runner_json() -> Value {
        json!({"AgentId": 42, "AgentName": "rm-1", "PoolId": 1, "PoolName": "Default",
               "ServerUrl": "http://127.0.0.1:9/_broker/", "ServerUrlV2": "http://127.0.0.1:9/_broker/",
               "GitHubUrl": "http://127.0.0.1:9/o/r", "WorkFolder": "_work", "Ephemeral": true,
               "DisableUpdate": false, "IsHostedServer": false, "UseV2Flow": true})
    }

    fn rsa_json() -> Value {
        let mut m = serde_json::Map::new();
        for k in RSA_KEYS {
            m.insert(k.to_owned(), json!("QUJD"));
        }
        Value::Object(m)
    }

    fn blob_of(files: &[(&str, Value)]) -> Secret {
        let mut m = serde_json::Map::new();
        for (name, content) in files {
            m.insert(
                (*name).to_owned(),
                json!(STANDARD.encode(content.to_string())),
            );
        }
        Secret::new(STANDARD.encode(Value::Object(m).to_string()))
    }

    fn valid_files() -> Vec<(&'static str, Value)> {
        vec![
            (RUNNER_FILE, runner_json()),
            (
                CREDENTIALS_FILE,
                json!({"Scheme": "OAuthAccessToken", "Data": {"token": TOKEN}}),
            ),
            (RSA_FILE, rsa_json()),
        ]
    }

    #[test]
    fn valid_blob_decodes_to_settings_and_token() {
        let config = RunnerConfig::from_jit_blob(&blob_of(&valid_files())).unwrap();
        assert_eq!(config.settings.agent_id, 42);
        assert_eq!(config.settings.agent_name, "rm-1");
        assert_eq!(config.settings.server_url, "http://127.0.0.1:9/_broker/");
        assert_eq!(config.settings.work_folder, "_work");
        assert_eq!(config.token.expose(), TOKEN);
    }

    #[test]
    fn debug_output_never_shows_the_secret() {
        let blob = blob_of(&valid_files());
        let config = RunnerConfig::from_jit_blob(&blob).unwrap();
        let shown = format!("{config:?} {blob:?} {blob}");
        assert!(!shown.contains(TOKEN), "{shown}");
        assert!(!shown.contains(blob.expose()));
        assert!(shown.contains("[redacted]"));
    }

    #[test]
    fn missing_key_is_refused() {
        let mut files = valid_files();
        files.retain(|(n, _)| *n != RSA_FILE);
        let err = RunnerConfig::from_jit_blob(&blob_of(&files)).unwrap_err();
        assert_eq!(
            err,
            ConfigError::InvalidJitConfig("the blob has no .credentials_rsaparams file")
        );
        assert!(err
            .to_string()
            .starts_with("Invalid configuration provided for jitconfig"));
    }

    #[test]
    fn bad_base64_is_refused_without_echoing_input() {
        let err = RunnerConfig::from_jit_blob(&Secret::new("not*base64*at*all")).unwrap_err();
        assert_eq!(err, ConfigError::InvalidJitConfig("the blob is not base64"));
        assert!(!err.to_string().contains("not*base64"));
    }

    #[test]
    fn inner_bad_base64_is_refused() {
        let blob = Secret::new(
            STANDARD.encode(
                json!({".runner": "%%%", ".credentials": "%%%", ".credentials_rsaparams": "%%%"})
                    .to_string(),
            ),
        );
        assert_eq!(
            RunnerConfig::from_jit_blob(&blob).unwrap_err(),
            ConfigError::InvalidJitConfig("a file in the blob is not base64")
        );
    }

    #[test]
    fn foreign_shapes_are_refused() {
        // Base64 of something that is not a JSON object.
        let not_json = Secret::new(STANDARD.encode("hello world"));
        assert!(matches!(
            RunnerConfig::from_jit_blob(&not_json),
            Err(ConfigError::InvalidJitConfig(_))
        ));
        // A classic (non-JIT) runner credential: RSA client credentials, no OAuth token.
        let mut files = valid_files();
        files[1] = (
            CREDENTIALS_FILE,
            json!({"Scheme": "OAuth", "Data": {"clientId": "x", "authorizationUrl": "y"}}),
        );
        assert_eq!(
            RunnerConfig::from_jit_blob(&blob_of(&files)).unwrap_err(),
            ConfigError::InvalidJitConfig(".credentials is not an OAuthAccessToken credential")
        );
        // A `.runner` without a broker URL.
        let mut files = valid_files();
        files[0] = (RUNNER_FILE, json!({"AgentId": 1, "AgentName": "x"}));
        assert!(RunnerConfig::from_jit_blob(&blob_of(&files)).is_err());
        // AgentId of the wrong type: the error must not echo the value.
        let mut files = valid_files();
        let mut runner = runner_json();
        runner["AgentId"] = json!("leaky-value");
        files[0] = (RUNNER_FILE, runner);
        let err = RunnerConfig::from_jit_blob(&blob_of(&files)).unwrap_err();
        assert!(!err.to_string().contains("leaky-value"));
    }

    #[test]
    fn written_files_load_back_and_are_removed() {
        let dir = std::env::temp_dir().join(format!("rm-fake-runner-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = RunnerConfig::from_jit_blob(&blob_of(&valid_files())).unwrap();
        config.write(&dir).unwrap();
        let loaded = RunnerConfig::load(&dir).unwrap();
        assert_eq!(loaded.settings, config.settings);
        assert_eq!(loaded.token, config.token);
        assert_eq!(remove_files(&dir), CONFIG_FILES.to_vec());
        assert_eq!(
            RunnerConfig::load(&dir).unwrap_err(),
            ConfigError::NotConfigured
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
