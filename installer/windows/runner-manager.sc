# runner-manager as a Windows service, one sc.exe invocation per line, arguments separated by
# TAB. Rendered by `runner-manager service install` (Windows; real use comes later).
create	runner-manager	binPath=	"{{BINARY}}" daemon run --data-dir "{{DATA_DIR}}" --start-at boot	start=	auto	obj=	LocalSystem	DisplayName=	runner-manager
description	runner-manager	Ephemeral GitHub Actions runners for this machine
failure	runner-manager	reset=	86400	actions=	restart/5000/restart/5000/restart/60000
