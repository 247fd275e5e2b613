//! Times of day as the CLI and the service's messages show them: on this machine's clock (the
//! service and whoever reads its answers share the machine's time zone, as quiet hours do).

/// `millis` since the epoch as a time of day in the local zone, in chrono's `format`
/// (`%H:%M:%S`); `None` for a time chrono cannot hold.
pub fn clock(millis: i64, format: &str) -> Option<String> {
    chrono::DateTime::from_timestamp_millis(millis)
        .map(|t| t.with_timezone(&chrono::Local).format(format).to_string())
}
