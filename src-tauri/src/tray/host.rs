//! Whether this desktop can show a tray icon. Without a StatusNotifierWatcher on the session
//! bus (stock GNOME, a bare X session) the icon would be invisible: the tray then opens the
//! dashboard and says why, instead of running unseen.

/// `None` when a tray host exists; otherwise why the icon cannot be shown.
#[cfg(target_os = "linux")]
pub fn missing_tray_host() -> Option<String> {
    const WATCHER: &str = "org.kde.StatusNotifierWatcher";
    let owned = zbus::blocking::Connection::session().and_then(|bus| {
        let dbus = zbus::blocking::fdo::DBusProxy::new(&bus)?;
        let name = zbus::names::BusName::try_from(WATCHER)
            .map_err(|e| zbus::Error::Failure(e.to_string()))?;
        Ok(dbus.name_has_owner(name)?)
    });
    match owned {
        Ok(true) => None,
        Ok(false) => Some(
            "This desktop shows no tray icons (nothing provides org.kde.StatusNotifierWatcher \
             on the session bus, e.g. stock GNOME), so runner-manager runs in this window. \
             On GNOME, install the \"AppIndicator and KStatusNotifierItem Support\" extension \
             to get the tray icon; closing this window quits the tray app (the service keeps \
             serving jobs)."
                .to_owned(),
        ),
        Err(e) => Some(format!(
            "No session bus to show a tray icon on ({e}), so runner-manager runs in this \
             window; closing it quits the tray app (the service keeps serving jobs)."
        )),
    }
}

#[cfg(not(target_os = "linux"))]
pub fn missing_tray_host() -> Option<String> {
    None
}
