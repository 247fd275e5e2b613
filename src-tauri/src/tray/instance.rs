//! One tray per desktop session. The first tray owns a name on the session bus; a second
//! launch asks it (a method call on that name) to show the window the launch asked for, and
//! exits. Written here rather than with Tauri's single-instance plugin because the icon
//! process is not a Tauri app; same mechanism (a well-known D-Bus name), scoped to the login
//! session as a tray should be. Elsewhere than Linux there is no guard yet (the windows'
//! process still is single-instance).

use crate::app::App;
use rm_tray::link::Window;

#[cfg(target_os = "linux")]
mod imp {
    use super::{App, Window};
    use std::sync::Mutex;

    const NAME: &str = "dev.runner_manager.Tray";
    const PATH: &str = "/dev/runner_manager/Tray";
    const INTERFACE: &str = "dev.runner_manager.Tray";

    pub struct Guard {
        connection: zbus::blocking::Connection,
    }

    pub enum Claim {
        Ours(Guard),
        HandedOver,
    }

    /// The object a second launch calls; it waits for the app until the loop runs.
    struct Instance {
        app: Mutex<Option<App>>,
    }

    #[zbus::interface(name = "dev.runner_manager.Tray")]
    impl Instance {
        fn show(&self, window: String) {
            let which = Window::parse(&window).unwrap_or(Window::Dashboard);
            let app = self
                .app
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            if let Some(app) = app {
                tracing::info!(window = which.label(), "another launch: showing its window");
                crate::windows::open(&app, which, None);
            }
        }
    }

    pub fn claim(show: Window) -> Result<Claim, String> {
        let built = zbus::blocking::connection::Builder::session()
            .and_then(|b| b.name(NAME))
            .map(|b| {
                b.replace_existing_names(false)
                    .allow_name_replacements(false)
            })
            .and_then(|b| {
                b.serve_at(
                    PATH,
                    Instance {
                        app: Mutex::new(None),
                    },
                )
            })
            .and_then(zbus::blocking::connection::Builder::build);
        match built {
            Ok(connection) => Ok(Claim::Ours(Guard { connection })),
            Err(zbus::Error::NameTaken) => {
                let bus = zbus::blocking::Connection::session().map_err(|e| e.to_string())?;
                bus.call_method(Some(NAME), PATH, Some(INTERFACE), "Show", &(show.label(),))
                    .map_err(|e| format!("the running tray did not answer: {e}"))?;
                Ok(Claim::HandedOver)
            }
            Err(e) => Err(format!("no session bus: {e}")),
        }
    }

    impl Guard {
        /// From now on a second launch's request is served.
        pub fn serve(&self, app: App) {
            let object = self
                .connection
                .object_server()
                .interface::<_, Instance>(PATH);
            match object {
                Ok(object) => {
                    *object
                        .get()
                        .app
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(app);
                }
                Err(error) => tracing::warn!(%error, "the single-instance object is missing"),
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::{App, Window};

    pub struct Guard;

    pub enum Claim {
        Ours(Guard),
        #[allow(dead_code)]
        HandedOver,
    }

    pub fn claim(_show: Window) -> Result<Claim, String> {
        Ok(Claim::Ours(Guard))
    }

    impl Guard {
        pub fn serve(&self, _app: App) {}
    }
}

pub use imp::{claim, Claim, Guard};
