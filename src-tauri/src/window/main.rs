//! runner-manager-window: the dashboard and the sign-in window of runner-manager (Tauri 2).
//! The icon process (`runner-manager-tray`) starts it when a window is asked for, and it ends
//! when its last window closes, so the web engine's memory is spent only while a window is
//! open. A client of the service's local API only (`rm-proto`); a second launch hands its
//! window over to the running one (single instance) and exits.
#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

mod args;
mod commands;
mod dto;
mod follow;
mod render;
mod windows;

use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};

use rm_proto::model::ModelOptions;
use rm_tray::link::{ToTray, Window};
use rm_tray::state::Shared;
use tauri::{Manager, RunEvent};

/// What this process knows beside the model.
pub struct Context {
    /// Started by the icon process, which reads this process's standard output.
    pub from_tray: bool,
    /// Work that must finish before the process ends (cancelling a sign-in on close).
    pub pending: AtomicUsize,
}

impl Context {
    /// Tells the icon process that started this one (nothing when started by hand).
    pub fn tell_tray(&self, message: ToTray) {
        if self.from_tray {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            if writeln!(out, "{}", message.line())
                .and_then(|()| out.flush())
                .is_err()
            {
                tracing::debug!("the tray is gone; not told");
            }
        }
    }
}

fn main() -> ExitCode {
    rm_tray::no_gl();
    rm_tray::init_logging();
    let args = match args::parse(std::env::args_os()) {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{}", args::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: the window could not open: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Reads a forwarded command line: which window, and where in it.
fn forwarded(argv: &[String]) -> (Window, Option<String>) {
    match args::parse(argv.iter().map(Into::into)) {
        Ok(Some(a)) => (a.show, a.anchor),
        _ => (Window::Dashboard, None),
    }
}

fn run(args: args::Args) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let sockets = match &args.socket {
        Some(s) => vec![s.clone()],
        None => rm_proto::sockets::default_sockets(),
    };
    let options = ModelOptions {
        notify_finished_jobs: args.notify_finished_jobs,
    };
    let shared = Shared::new(sockets, options);
    shared.set_no_tray(args.no_tray.clone());
    let (show, anchor) = (args.show, args.anchor.clone());
    let app = tauri::Builder::default()
        // First: a second launch hands its window over to this one and exits.
        .plugin(tauri_plugin_single_instance::init(|app, argv, _cwd| {
            let (which, anchor) = forwarded(&argv);
            tracing::info!(window = which.label(), "another launch: showing its window");
            windows::show(app, which, anchor);
        }))
        .plugin(tauri_plugin_opener::init())
        .plugin(tauri_plugin_clipboard_manager::init())
        .manage(shared)
        .manage(Context {
            from_tray: args.from_tray,
            pending: AtomicUsize::new(0),
        })
        .invoke_handler(tauri::generate_handler![
            commands::model,
            commands::acknowledge,
            commands::start_sign_in,
            commands::cancel_sign_in,
            commands::sign_out,
            commands::add_target,
            commands::update_target,
            commands::remove_target,
            commands::why,
            commands::set_paused,
            commands::set_host_capacity,
            commands::apply_update,
            commands::copy_text,
            commands::open_url,
            commands::show_window,
            commands::close_window,
            commands::autostart_enabled,
            commands::set_autostart,
            commands::set_notify_finished_jobs,
        ])
        .setup(move |app| {
            let handle = app.handle().clone();
            follow::spawn(handle.clone());
            windows::show(&handle, show, anchor);
            Ok(())
        })
        .build(tauri::generate_context!())
        .context("building the app")?;
    app.run(|app, event| {
        // The last window closed: the process ends, unless a sign-in is still being cancelled
        // (that ends it when done).
        if let RunEvent::ExitRequested {
            api, code: None, ..
        } = event
        {
            if app.state::<Context>().pending.load(Ordering::SeqCst) > 0 {
                api.prevent_exit();
            }
        }
    });
    Ok(())
}
