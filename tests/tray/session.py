#!/usr/bin/python3
"""A desktop session for the tray tests, run inside `dbus-run-session` with Debian's python3
(it has `dbus` and `gi`).

It starts Xvfb (a free display, chosen by Xvfb itself), and on the session bus a fake
StatusNotifierWatcher (so the tray's icon registers, and its menu can be read and clicked
through com.canonical.dbusmenu) and a fake notification server that records every Notify call
(and can "click" one). Optionally it starts gnome-keyring as the Secret Service.

It takes one JSON command per line on stdin and answers one JSON line on stdout; the first
line it prints is {"ready": true, "display": ":N", "bus": "<address>"}.
Commands: items, item, layout, click {id}, notifications, invoke {id, action},
screenshot {path}, windows, quit.
"""
import json
import os
import subprocess
import sys
import time

import dbus
import dbus.service
from dbus.mainloop.glib import DBusGMainLoop
from gi.repository import GLib

WATCHER = "org.kde.StatusNotifierWatcher"
NOTIFY = "org.freedesktop.Notifications"


class Watcher(dbus.service.Object):
    def __init__(self, bus):
        self.items = []
        super().__init__(bus, "/StatusNotifierWatcher")

    @dbus.service.method(WATCHER, in_signature="s", out_signature="", sender_keyword="sender")
    def RegisterStatusNotifierItem(self, service, sender=None):
        # ayatana passes an object path; others pass a bus name.
        item = f"{sender}{service}" if service.startswith("/") else f"{service}/StatusNotifierItem"
        if item not in self.items:
            self.items.append(item)
        self.StatusNotifierItemRegistered(item)

    @dbus.service.method(WATCHER, in_signature="s", out_signature="")
    def RegisterStatusNotifierHost(self, service):
        pass

    @dbus.service.signal(WATCHER, signature="s")
    def StatusNotifierItemRegistered(self, item):
        pass

    @dbus.service.method(dbus.PROPERTIES_IFACE, in_signature="ss", out_signature="v")
    def Get(self, interface, prop):
        return self.GetAll(interface)[prop]

    @dbus.service.method(dbus.PROPERTIES_IFACE, in_signature="s", out_signature="a{sv}")
    def GetAll(self, interface):
        return {
            "RegisteredStatusNotifierItems": dbus.Array(self.items, signature="s"),
            "IsStatusNotifierHostRegistered": dbus.Boolean(True),
            "ProtocolVersion": dbus.Int32(0),
        }


class Notifications(dbus.service.Object):
    def __init__(self, bus):
        self.log = []
        super().__init__(bus, "/org/freedesktop/Notifications")

    @dbus.service.method(NOTIFY, in_signature="susssasa{sv}i", out_signature="u")
    def Notify(self, app_name, replaces_id, icon, summary, body, actions, hints, timeout):
        nid = len(self.log) + 1
        self.log.append({
            "id": nid, "app_name": str(app_name), "summary": str(summary), "body": str(body),
            "actions": [str(a) for a in actions], "at": time.time(),
        })
        return dbus.UInt32(nid)

    @dbus.service.method(NOTIFY, in_signature="", out_signature="as")
    def GetCapabilities(self):
        return ["actions", "body"]

    @dbus.service.method(NOTIFY, in_signature="", out_signature="ssss")
    def GetServerInformation(self):
        return ("fake-notifications", "runner-manager tests", "1.0", "1.2")

    @dbus.service.method(NOTIFY, in_signature="u", out_signature="")
    def CloseNotification(self, nid):
        self.NotificationClosed(nid, 3)

    @dbus.service.signal(NOTIFY, signature="us")
    def ActionInvoked(self, nid, action):
        pass

    @dbus.service.signal(NOTIFY, signature="uu")
    def NotificationClosed(self, nid, reason):
        pass


def plain(v):
    """D-Bus values as JSON-able Python values."""
    if isinstance(v, (dbus.Boolean,)):
        return bool(v)
    if isinstance(v, (dbus.Int16, dbus.Int32, dbus.Int64, dbus.UInt16, dbus.UInt32, dbus.UInt64, dbus.Byte)):
        return int(v)
    if isinstance(v, (dbus.Double,)):
        return float(v)
    if isinstance(v, (dbus.String, dbus.ObjectPath, dbus.Signature)):
        return str(v)
    if isinstance(v, dbus.Dictionary):
        return {str(k): plain(x) for k, x in v.items()}
    if isinstance(v, (dbus.Array, dbus.Struct, list, tuple)):
        if len(v) > 256:
            return f"<{len(v)} items>"
        return [plain(x) for x in v]
    return v


def node(layout):
    nid, props, children = layout
    p = plain(props)
    return {
        "id": int(nid),
        "label": p.get("label", ""),
        "enabled": p.get("enabled", True),
        "visible": p.get("visible", True),
        "type": p.get("type", "standard"),
        "toggle_type": p.get("toggle-type", ""),
        "toggle_state": p.get("toggle-state", -1),
        "children_display": p.get("children-display", ""),
        "children": [node(c) for c in children],
    }


class Session:
    def __init__(self, bus, watcher, notifications):
        self.bus = bus
        self.watcher = watcher
        self.notifications = notifications

    def item(self):
        if not self.watcher or not self.watcher.items:
            return None
        item = self.watcher.items[-1]
        name, path = item[: item.index("/")], item[item.index("/"):]
        return name, path

    def run(self, cmd):
        c = cmd.get("cmd")
        if c == "items":
            return {"items": self.watcher.items if self.watcher else []}
        if c == "item":
            it = self.item()
            if not it:
                return {"item": None}
            obj = self.bus.get_object(it[0], it[1])
            props = obj.GetAll("org.kde.StatusNotifierItem", dbus_interface=dbus.PROPERTIES_IFACE, timeout=5)
            return {"item": {k: plain(v) for k, v in props.items()}}
        if c == "layout":
            it = self.item()
            if not it:
                return {"layout": None}
            obj = self.bus.get_object(it[0], it[1])
            menu = obj.Get("org.kde.StatusNotifierItem", "Menu", dbus_interface=dbus.PROPERTIES_IFACE, timeout=5)
            m = self.bus.get_object(it[0], menu)
            revision, layout = m.GetLayout(0, -1, dbus.Array([], signature="s"),
                                           dbus_interface="com.canonical.dbusmenu", timeout=5)
            return {"revision": int(revision), "layout": node(layout)}
        if c == "click":
            it = self.item()
            obj = self.bus.get_object(it[0], it[1])
            menu = obj.Get("org.kde.StatusNotifierItem", "Menu", dbus_interface=dbus.PROPERTIES_IFACE, timeout=5)
            m = self.bus.get_object(it[0], menu)
            m.Event(dbus.Int32(cmd["id"]), "clicked", dbus.Int32(0, variant_level=1), dbus.UInt32(int(time.time())),
                    dbus_interface="com.canonical.dbusmenu", timeout=5)
            return {"clicked": cmd["id"]}
        if c == "notifications":
            return {"notifications": self.notifications.log if self.notifications else []}
        if c == "invoke":
            self.notifications.ActionInvoked(dbus.UInt32(cmd["id"]), cmd.get("action", "default"))
            return {"invoked": cmd["id"]}
        if c == "screenshot":
            target = "root"
            if cmd.get("window"):
                found = subprocess.run(["xdotool", "search", "--onlyvisible", "--name", "^" + cmd["window"] + "$"],
                                       capture_output=True, text=True, timeout=10).stdout.split()
                if not found:
                    return {"error": f"no window named {cmd['window']!r}"}
                target = found[-1]
            subprocess.run(["/usr/bin/import", "-window", target, cmd["path"]], check=True, timeout=30)
            return {"path": cmd["path"]}
        if c == "close":
            # What a window manager does for the close button: WM_DELETE_WINDOW to the window.
            found = subprocess.run(["xdotool", "search", "--onlyvisible", "--name", "^" + cmd["window"] + "$"],
                                   capture_output=True, text=True, timeout=10).stdout.split()
            if not found:
                return {"error": f"no window named {cmd['window']!r}"}
            from Xlib import X, display, protocol
            d = display.Display()
            w = d.create_resource_object("window", int(found[-1]))
            ev = protocol.event.ClientMessage(window=w, client_type=d.intern_atom("WM_PROTOCOLS"),
                                              data=(32, [d.intern_atom("WM_DELETE_WINDOW"), X.CurrentTime, 0, 0, 0]))
            w.send_event(ev, event_mask=X.NoEventMask)
            d.flush()
            d.close()
            return {"closed": found[-1]}
        if c == "windows":
            out = subprocess.run(["xdotool", "search", "--onlyvisible", "--name", "."],
                                 capture_output=True, text=True, timeout=10)
            names = []
            for wid in out.stdout.split():
                n = subprocess.run(["xdotool", "getwindowname", wid], capture_output=True, text=True, timeout=10)
                names.append(n.stdout.strip())
            return {"windows": names}
        if c == "quit":
            GLib.idle_add(loop.quit)
            return {"quit": True}
        return {"error": f"unknown command {c!r}"}


def start_xvfb():
    r, w = os.pipe()
    xvfb = subprocess.Popen(["Xvfb", "-displayfd", str(w), "-screen", "0", "1280x800x24", "-nolisten", "tcp"],
                            pass_fds=(w,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(w)
    number = b""
    while not number.endswith(b"\n"):
        chunk = os.read(r, 16)
        if not chunk:
            raise SystemExit("Xvfb did not report a display")
        number += chunk
    os.close(r)
    return xvfb, f":{number.decode().strip()}"


def main():
    global loop
    args = sys.argv[1:]
    DBusGMainLoop(set_as_default=True)
    xvfb, display = start_xvfb()
    os.environ["DISPLAY"] = display
    bus = dbus.SessionBus()
    watcher = None
    names = []  # the names stay owned while these objects live
    if "--no-watcher" not in args:
        names.append(dbus.service.BusName(WATCHER, bus))
        watcher = Watcher(bus)
    names.append(dbus.service.BusName(NOTIFY, bus))
    notifications = Notifications(bus)
    if "--keyring" in args:
        # The Secret Service, unlocked before anything touches it (else it comes up locked).
        data = os.environ["RM_SESSION_KEYRING_DIR"]
        run = os.path.join(data, "run")
        os.makedirs(run, mode=0o700, exist_ok=True)
        env = dict(os.environ, XDG_DATA_HOME=os.path.join(data, "data"), XDG_RUNTIME_DIR=run)
        subprocess.run(["gnome-keyring-daemon", "--unlock", "--components=secrets"], input=b"pw",
                       env=env, check=True, stdout=subprocess.DEVNULL, timeout=30)
        dbus_iface = dbus.Interface(bus.get_object("org.freedesktop.DBus", "/org/freedesktop/DBus"), "org.freedesktop.DBus")
        for _ in range(200):
            if dbus_iface.NameHasOwner("org.freedesktop.secrets"):
                break
            time.sleep(0.05)
    session = Session(bus, watcher, notifications)
    loop = GLib.MainLoop()

    def on_line(fd, cond):
        line = sys.stdin.readline()
        if not line:
            loop.quit()
            return False
        try:
            reply = session.run(json.loads(line))
        except Exception as e:  # the test reads the error
            reply = {"error": f"{type(e).__name__}: {e}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
        return True

    GLib.io_add_watch(sys.stdin.fileno(), GLib.IO_IN | GLib.IO_HUP, on_line)
    sys.stdout.write(json.dumps({"ready": True, "display": display,
                                 "bus": os.environ.get("DBUS_SESSION_BUS_ADDRESS", "")}) + "\n")
    sys.stdout.flush()
    try:
        loop.run()
    finally:
        xvfb.terminate()
        xvfb.wait(timeout=10)


if __name__ == "__main__":
    main()
