//! API versioning and the handshake.
//!
//! Every path starts with `/v{API_VERSION}`; every response carries [`API_HEADER`] and
//! [`SERVICE_VERSION_HEADER`]; every client request carries [`API_HEADER`] too, so each side
//! can tell the other exactly which one to update.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The API version this crate speaks.
pub const API_VERSION: u32 = 1;

/// The oldest client API a service built from this crate still serves.
pub const MIN_CLIENT_API: u32 = 1;

/// Response (and request) header naming the API version the sender speaks.
pub const API_HEADER: &str = "x-runner-manager-api";

/// Response header naming the service's own version (e.g. `0.1.0`).
pub const SERVICE_VERSION_HEADER: &str = "x-runner-manager-version";

/// `GET /v1/version`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionInfo {
    /// The API version the service speaks.
    pub api: u32,
    /// The service's own version.
    pub service_version: String,
    /// The oldest client API the service still serves.
    pub min_client_api: u32,
}

impl VersionInfo {
    /// What a service built from this crate reports.
    pub fn current(service_version: impl Into<String>) -> Self {
        VersionInfo {
            api: API_VERSION,
            service_version: service_version.into(),
            min_client_api: MIN_CLIENT_API,
        }
    }
}

/// The two sides cannot talk; the message says which side to update.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum VersionMismatch {
    #[error(
        "the service speaks API {service_api} but this {client_name} needs {client_api}: \
         update runner-manager (the service, now {service_version})"
    )]
    ServiceTooOld {
        service_api: u32,
        service_version: String,
        client_api: u32,
        client_name: String,
    },
    #[error(
        "the service (runner-manager {service_version}) needs clients speaking API \
         {min_client_api} or newer but this {client_name} speaks {client_api}: update the \
         {client_name}"
    )]
    ClientTooOld {
        min_client_api: u32,
        service_version: String,
        client_api: u32,
        client_name: String,
    },
}

/// Whether a client speaking `client_api` can use the service described by `info`.
///
/// A client needs the service to speak at least its own API version (newer versions only add);
/// the service refuses clients older than its `min_client_api`.
pub fn check_compatibility(
    client_api: u32,
    client_name: &str,
    info: &VersionInfo,
) -> Result<(), VersionMismatch> {
    if info.api < client_api {
        return Err(VersionMismatch::ServiceTooOld {
            service_api: info.api,
            service_version: info.service_version.clone(),
            client_api,
            client_name: client_name.to_owned(),
        });
    }
    if client_api < info.min_client_api {
        return Err(VersionMismatch::ClientTooOld {
            min_client_api: info.min_client_api,
            service_version: info.service_version.clone(),
            client_api,
            client_name: client_name.to_owned(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(api: u32, min: u32) -> VersionInfo {
        VersionInfo {
            api,
            service_version: "9.9.9".into(),
            min_client_api: min,
        }
    }

    #[test]
    fn same_and_newer_services_are_compatible() {
        assert!(check_compatibility(1, "tray", &info(1, 1)).is_ok());
        assert!(check_compatibility(1, "tray", &info(2, 1)).is_ok());
    }

    #[test]
    fn mismatches_name_the_side_to_update() {
        let old_service = check_compatibility(2, "tray", &info(1, 1)).unwrap_err();
        assert_eq!(
            old_service.to_string(),
            "the service speaks API 1 but this tray needs 2: update runner-manager (the service, now 9.9.9)"
        );
        let old_client = check_compatibility(1, "CLI", &info(3, 2)).unwrap_err();
        assert!(matches!(old_client, VersionMismatch::ClientTooOld { .. }));
        assert!(old_client.to_string().contains("update the CLI"));
    }
}
