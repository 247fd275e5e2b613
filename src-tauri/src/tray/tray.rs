//! The tray icon and its menu, rendered from the model's view. Linux (ayatana) has no tooltip:
//! the one-line summary goes to the menu's header, and the short header to the label some
//! panels draw beside the icon; elsewhere the tooltip carries the summary.

use crate::app::App;
use rm_proto::model::{TrayState, UpdateAction, View};
use rm_proto::{RunnerState, Status, TargetState, TargetStatus, UnixMillis};
use rm_tray::autostart;
use tray_icon::menu::{CheckMenuItem, IsMenuItem, Menu, MenuItem, PredefinedMenuItem, Submenu};
use tray_icon::{TrayIcon, TrayIconBuilder};

pub const TRAY_ID: &str = "runner-manager";

/// The icon on screen and what it shows (lives on the main loop).
pub struct Icon {
    tray: TrayIcon,
    rendered: Rendered,
}

/// What is on screen now. An unchanged model changes nothing; a model whose menu has the same
/// shape (the same items in the same places) updates the items' texts and checks in place, so
/// item ids stay stable while the menu is open (elapsed times change every second).
#[derive(Default)]
struct Rendered {
    icon: Option<TrayState>,
    menu: Vec<Line>,
    items: Vec<Handle>,
    title: String,
}

/// A built item that may change in place.
enum Handle {
    Text(MenuItem),
    Check(CheckMenuItem),
    Sub(Submenu),
    Separator,
}

/// One menu line as data (the menu is rebuilt from these when their shape changes).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Line {
    Text {
        id: String,
        text: String,
        enabled: bool,
    },
    Check {
        id: String,
        text: String,
        checked: bool,
    },
    Separator,
    Sub {
        text: String,
        items: Vec<Line>,
    },
}

/// The shape of a menu: kinds and ids, not texts or checks.
fn shape(lines: &[Line]) -> Vec<String> {
    let mut out = Vec::new();
    for l in lines {
        match l {
            Line::Text { id, .. } => out.push(format!("t:{id}")),
            Line::Check { id, .. } => out.push(format!("c:{id}")),
            Line::Separator => out.push("-".to_owned()),
            Line::Sub { items, .. } => {
                out.push("(".to_owned());
                out.extend(shape(items));
                out.push(")".to_owned());
            }
        }
    }
    out
}

/// The lines in build order (depth first), as [`build_items`] records their handles.
fn flat(lines: &[Line]) -> Vec<&Line> {
    let mut out = Vec::new();
    for l in lines {
        out.push(l);
        if let Line::Sub { items, .. } = l {
            out.extend(flat(items));
        }
    }
    out
}

/// Brings built items to `lines` (same shape) without rebuilding.
fn update_in_place(handles: &[Handle], lines: &[Line]) {
    for (h, l) in handles.iter().zip(flat(lines)) {
        match (h, l) {
            (Handle::Text(item), Line::Text { text, enabled, .. }) => {
                item.set_text(text);
                item.set_enabled(*enabled);
            }
            (Handle::Check(item), Line::Check { text, checked, .. }) => {
                item.set_text(text);
                item.set_checked(*checked);
            }
            (Handle::Sub(item), Line::Sub { text, .. }) => item.set_text(text),
            _ => {}
        }
    }
}

fn text(id: &str, text: impl Into<String>, enabled: bool) -> Line {
    Line::Text {
        id: id.to_owned(),
        text: text.into(),
        enabled,
    }
}

fn icon(state: TrayState) -> Option<tray_icon::Icon> {
    let bytes: &'static [u8] = match state.icon() {
        "idle" => include_bytes!("../../../icons/tray/idle@2x.png"),
        "busy" => include_bytes!("../../../icons/tray/busy@2x.png"),
        "paused" => include_bytes!("../../../icons/tray/paused@2x.png"),
        "attention" => include_bytes!("../../../icons/tray/attention@2x.png"),
        "signed-out" => include_bytes!("../../../icons/tray/signed-out@2x.png"),
        "not-allowed" => include_bytes!("../../../icons/tray/not-allowed@2x.png"),
        _ => include_bytes!("../../../icons/tray/down@2x.png"),
    };
    match decode_png(bytes) {
        Ok((rgba, width, height)) => tray_icon::Icon::from_rgba(rgba, width, height).ok(),
        Err(error) => {
            tracing::warn!(%error, "an icon did not decode");
            None
        }
    }
}

/// The committed PNGs are 8-bit RGBA (`scripts/icons.sh`); anything else is refused.
fn decode_png(bytes: &[u8]) -> Result<(Vec<u8>, u32, u32), String> {
    let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    let mut reader = decoder.read_info().map_err(|e| e.to_string())?;
    let size = reader
        .output_buffer_size()
        .ok_or_else(|| "too large".to_owned())?;
    let mut buf = vec![0; size];
    let info = reader.next_frame(&mut buf).map_err(|e| e.to_string())?;
    if info.color_type != png::ColorType::Rgba || info.bit_depth != png::BitDepth::Eight {
        return Err(format!(
            "{:?} {:?}, not 8-bit RGBA",
            info.color_type, info.bit_depth
        ));
    }
    buf.truncate(info.buffer_size());
    Ok((buf, info.width, info.height))
}

fn target_words(t: &TargetStatus) -> String {
    let state = match (t.enabled, t.state) {
        (false, _) => "disabled",
        (true, _) if t.problem.is_some() => "needs attention",
        (true, TargetState::Active) if t.max_capacity.is_none() => "monitor only",
        (true, TargetState::Active) => "active",
        (true, TargetState::Pending) => "starting",
        (true, TargetState::Draining) => "draining",
        (true, TargetState::Disabled) => "disabled",
        (true, TargetState::AuthenticationFailed) => "sign-in needed",
        (true, TargetState::RepairRequired) => "needs repair",
        (true, TargetState::Unknown) => "unknown state",
    };
    format!("{} — {state}", t.target)
}

/// Menus do not wrap: a long line is cut at a word, the whole text is in the dashboard.
const MENU_LINE_CHARS: usize = 110;

fn clip(text: &str) -> String {
    if text.chars().count() <= MENU_LINE_CHARS {
        return text.to_owned();
    }
    let cut: String = text.chars().take(MENU_LINE_CHARS).collect();
    let at = cut.rfind(' ').unwrap_or(cut.len());
    format!("{}…", cut[..at].trim_end_matches([',', ';', ':']))
}

/// The menu's lines for a view; `about` is the About line, `offer_install` the portable
/// archive's first-run step (see `first_run`), with whether it is running now.
fn lines(
    view: &View,
    status: Option<&Status>,
    start_at_login: bool,
    offer_install: Option<bool>,
    about: &str,
) -> Vec<Line> {
    let mut out = vec![text("header", clip(&view.header), false)];
    if let Some(installing) = offer_install {
        out.push(if installing {
            text("install-service", "Installing the service…", false)
        } else {
            text("install-service", "Install the service for this user", true)
        });
    } else if let Some(concern) = view.concerns.first() {
        // The fix, right under the header (e.g. the command that starts the service).
        out.push(text("fix", clip(&concern.fix), false));
    }
    if let Some(update) = &view.update {
        if let Some(item) = &update.menu {
            out.push(Line::Separator);
            let id = match update.action {
                Some(UpdateAction::Apply) => "update",
                _ => "update-info",
            };
            out.push(text(id, clip(item), update.action.is_some()));
            if let Some(fix) = &update.fix {
                out.push(text("update-fix", clip(fix), false));
            }
        }
    }
    let connected = matches!(
        view.state,
        TrayState::Attention
            | TrayState::SignedOut
            | TrayState::Paused
            | TrayState::Busy
            | TrayState::Idle
    ) && status.is_some();
    if let (true, Some(status)) = (connected, status) {
        if !view.runners.is_empty() {
            out.push(Line::Separator);
            for r in &view.runners {
                let id = format!("runner:{}", r.attempt_id);
                let clickable = r.job_url.is_some() && r.state == RunnerState::Busy;
                out.push(text(&id, r.line.clone(), clickable));
            }
        }
        out.push(Line::Separator);
        let mut targets: Vec<Line> = status
            .targets
            .iter()
            .map(|t| Line::Check {
                id: format!("target:{}:{}", t.kind.as_str(), t.target),
                text: target_words(t),
                checked: t.enabled,
            })
            .collect();
        if !targets.is_empty() {
            targets.push(Line::Separator);
        }
        targets.push(text("add-target", "Add repository or organization…", true));
        out.push(Line::Sub {
            text: format!("Targets ({})", status.targets.len()),
            items: targets,
        });
        if status.paused {
            out.push(text("resume", "Resume launching", true));
        } else {
            out.push(text("pause", "Pause launching", true));
        }
        out.push(Line::Separator);
        match &view.signed_in_as {
            Some(login) => {
                out.push(text("signed-in", format!("Signed in as {login}"), false));
                out.push(text("sign-out", "Sign out", true));
            }
            None => out.push(text("sign-in", "Sign in…", true)),
        }
    }
    out.push(Line::Separator);
    out.push(text("dashboard", "Open dashboard", true));
    out.push(text("about", about, true));
    out.push(Line::Check {
        id: "autostart".to_owned(),
        text: "Start at login".to_owned(),
        checked: start_at_login,
    });
    out.push(text(
        "quit",
        "Quit tray (the service keeps serving jobs)",
        true,
    ));
    out
}

fn build_items(
    lines: &[Line],
    handles: &mut Vec<Handle>,
) -> Result<Vec<Box<dyn IsMenuItem>>, tray_icon::menu::Error> {
    let mut items: Vec<Box<dyn IsMenuItem>> = Vec::new();
    for line in lines {
        match line {
            Line::Text { id, text, enabled } => {
                let item = MenuItem::with_id(id.as_str(), text, *enabled, None);
                handles.push(Handle::Text(item.clone()));
                items.push(Box::new(item));
            }
            Line::Check { id, text, checked } => {
                let item = CheckMenuItem::with_id(id.as_str(), text, true, *checked, None);
                handles.push(Handle::Check(item.clone()));
                items.push(Box::new(item));
            }
            Line::Separator => {
                handles.push(Handle::Separator);
                items.push(Box::new(PredefinedMenuItem::separator()));
            }
            Line::Sub { text, items: sub } => {
                let at = handles.len();
                handles.push(Handle::Separator); // replaced below, once the submenu exists
                let children = build_items(sub, handles)?;
                let refs: Vec<&dyn IsMenuItem> = children.iter().map(|b| b.as_ref()).collect();
                let submenu = Submenu::with_items(text, true, &refs)?;
                handles[at] = Handle::Sub(submenu.clone());
                items.push(Box::new(submenu));
            }
        }
    }
    Ok(items)
}

fn build_menu(lines: &[Line]) -> Result<(Menu, Vec<Handle>), tray_icon::menu::Error> {
    let mut handles = Vec::new();
    let items = build_items(lines, &mut handles)?;
    let refs: Vec<&dyn IsMenuItem> = items.iter().map(|b| b.as_ref()).collect();
    Ok((Menu::with_items(&refs)?, handles))
}

impl Icon {
    /// Creates the tray icon (state: connecting). On the main loop, once GTK runs.
    pub fn create() -> Result<Icon, String> {
        let (menu, items) = build_menu(&[text("header", "Connecting to the service…", false)])
            .map_err(|e| e.to_string())?;
        let mut builder = TrayIconBuilder::new()
            .with_id(TRAY_ID)
            .with_tooltip("runner-manager")
            .with_menu_on_left_click(true)
            .with_menu(Box::new(menu));
        if let Some(image) = icon(TrayState::Connecting) {
            builder = builder.with_icon(image);
        }
        let tray = builder.build().map_err(|e| e.to_string())?;
        Ok(Icon {
            tray,
            rendered: Rendered {
                icon: Some(TrayState::Connecting),
                menu: vec![text("header", "Connecting to the service…", false)],
                items,
                title: String::new(),
            },
        })
    }

    /// Brings the tray in line with the model; rebuilds only what changed.
    pub fn render(&mut self, app: &App) {
        let (view, status, about) = {
            let m = app.shared.model();
            (
                m.view(UnixMillis::now()),
                m.status.clone(),
                m.about(rm_tray::TRAY_VERSION),
            )
        };
        let offer_install = (view.state == TrayState::ServiceDown
            && crate::first_run::portable_service().is_some())
        .then(|| app.installing.load(std::sync::atomic::Ordering::SeqCst));
        let wanted = lines(
            &view,
            status.as_ref(),
            autostart::is_enabled(),
            offer_install,
            &about,
        );
        let done = &mut self.rendered;
        if done.menu != wanted {
            let same_shape = shape(&done.menu) == shape(&wanted) && !done.items.is_empty();
            if same_shape {
                update_in_place(&done.items, &wanted);
                done.menu = wanted;
            } else {
                match build_menu(&wanted) {
                    Ok((menu, handles)) => {
                        self.tray.set_menu(Some(Box::new(menu)));
                        done.menu = wanted;
                        done.items = handles;
                    }
                    Err(error) => tracing::warn!(%error, "could not build the tray menu"),
                }
            }
        }
        if done.icon != Some(view.state) {
            if let Err(error) = self.tray.set_icon(icon(view.state)) {
                tracing::warn!(%error, "could not change the tray icon");
            }
            done.icon = Some(view.state);
        }
        if done.title != view.summary {
            // Linux: no tooltip; the header is the label some panels show beside the icon.
            if cfg!(target_os = "linux") {
                self.tray.set_title(Some(&view.header));
            }
            let _ = self.tray.set_tooltip(Some(&view.summary));
            done.title = view.summary.clone();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{clip, decode_png, icon};
    use rm_proto::model::TrayState;

    #[test]
    fn every_state_has_an_icon_that_decodes() {
        for state in [
            TrayState::Connecting,
            TrayState::Idle,
            TrayState::Busy,
            TrayState::Paused,
            TrayState::Attention,
            TrayState::SignedOut,
            TrayState::NotAllowed,
            TrayState::ServiceDown,
        ] {
            assert!(icon(state).is_some(), "{state:?}");
        }
        let (rgba, w, h) = decode_png(include_bytes!("../../../icons/tray/idle@2x.png")).unwrap();
        assert_eq!((w, h, rgba.len()), (64, 64, 64 * 64 * 4));
        assert!(decode_png(b"not a png").is_err());
    }

    #[test]
    fn long_menu_lines_are_cut_at_a_word() {
        assert_eq!(clip("short"), "short");
        let long = "word ".repeat(40);
        let c = clip(&long);
        assert!(c.ends_with("word…"), "{c}");
        assert!(c.chars().count() <= 111, "{c}");
    }
}
