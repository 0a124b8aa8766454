# auth-agent: build and install for one user (default) or for packagers.
#
#   make install                 # release build into ~/.local, user units, D-Bus service, completions, man page;
#                                # enables the socket
#   make install PREFIX=/usr DESTDIR=/tmp/pkgroot    # for packagers: nothing is enabled
#   make uninstall               # removes exactly what `make install` recorded
#   make deb                     # Debian package of the release build: .build/deb/auth-agent_VERSION_ARCH.deb
#
# CONFIGURATION=debug reuses the debug build (used by the tests). BUILT=DIR installs the binaries already built in
# DIR (e.g. .build/release) without running swift (used by the tests that install what CI built).
# The installed binaries are stripped (the build tree keeps its symbols for backtraces and profiles); STRIP=true
# installs them as built.

PREFIX        ?= $(HOME)/.local
DESTDIR       ?=
CONFIGURATION ?= release
SWIFT         ?= swift
STRIP         ?= strip

BINDIR        := $(PREFIX)/bin
DATADIR       := $(PREFIX)/share
MANDIR        := $(DATADIR)/man/man1
DOCDIR        := $(DATADIR)/doc/auth-agent
# The docs README links to, installed beside it in the same layout so its links work.
USERDOCS      := INTEGRATIONS.md PROVIDERS.md CLI.md DBUS.md PROTOCOL.md SECURITY.md
BASHCOMPDIR   := $(DATADIR)/bash-completion/completions
ZSHCOMPDIR    := $(DATADIR)/zsh/site-functions
FISHCOMPDIR   := $(DATADIR)/fish/vendor_completions.d
# systemd looks for user units in ~/.config/systemd/user (per user) and $PREFIX/lib/systemd/user (packages).
ifeq ($(PREFIX),$(HOME)/.local)
USERUNITDIR   ?= $(HOME)/.config/systemd/user
else
USERUNITDIR   ?= $(PREFIX)/lib/systemd/user
endif
# The session bus looks for activatable services in $XDG_DATA_HOME/dbus-1/services (~/.local/share) and
# $XDG_DATA_DIRS/dbus-1/services (/usr/share, /usr/local/share).
DBUSSERVICEDIR ?= $(DATADIR)/dbus-1/services
DBUSIFACEDIR   ?= $(DATADIR)/dbus-1/interfaces
MANIFEST      := $(DATADIR)/auth-agent/install-manifest

BUILT         ?=
BUILDDIR       = $(if $(BUILT),$(BUILT),$(shell $(SWIFT) build -c $(CONFIGURATION) --show-bin-path))
# The release build compiles every module, the dependencies' too (BoringSSL's two copies among them), with the flags in
# this toolset, which Package.swift cannot give another package's targets: every function and C datum in a section of
# its own and Swift's public functions not retained by default, so that the link's --gc-sections drops what neither
# program calls (52.9 -> 47.2 MB installed; docs/BENCHMARKS.md, "Installed size"). scripts/test and scripts/bench
# build with it too; a release build without it works the same and is only bigger (and fails the package stage's
# size guard).
RELEASE_TOOLSET := packaging/release-toolset.json
SWIFTBUILD     = $(SWIFT) build -c $(CONFIGURATION) $(if $(filter release,$(CONFIGURATION)),--toolset $(RELEASE_TOOLSET))

.PHONY: all build install uninstall deb man test demo

all: build

build:
	$(SWIFTBUILD) --product auth-agent
	$(SWIFTBUILD) --product authctl

install: $(if $(BUILT),,build)
	@set -e; root="$(DESTDIR)"; bin="$(BUILDDIR)"; manifest="$$root$(MANIFEST)"; \
	put() { install -D -m "$$1" "$$2" "$$root$$3"; echo "$(strip $$3)" >> "$$manifest.tmp"; echo "  $$root$$3"; }; \
	mkdir -p "$$(dirname "$$manifest")"; : > "$$manifest.tmp"; \
	echo "installing into $${root:-/}$(PREFIX):"; \
	put 755 "$$bin/auth-agent" "$(BINDIR)/auth-agent"; $(STRIP) "$$root$(BINDIR)/auth-agent"; \
	put 755 "$$bin/authctl" "$(BINDIR)/authctl"; $(STRIP) "$$root$(BINDIR)/authctl"; \
	tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	units="s|^ExecStart=.*|ExecStart=$(BINDIR)/auth-agent|; s|^ExecReload=[^ ]*|ExecReload=$(BINDIR)/authctl|; s|^Documentation=.*|Documentation=file://$(DOCDIR)/README.md|"; \
	sed "$$units" systemd/auth-agent.service > "$$tmp/auth-agent.service"; \
	sed "$$units" systemd/auth-agent.socket > "$$tmp/auth-agent.socket"; \
	put 644 "$$tmp/auth-agent.service" "$(USERUNITDIR)/auth-agent.service"; \
	put 644 "$$tmp/auth-agent.socket" "$(USERUNITDIR)/auth-agent.socket"; \
	sed 's|^Exec=.*|Exec=$(BINDIR)/auth-agent|' dbus/dev.authagent.Agent.service > "$$tmp/dev.authagent.Agent.service"; \
	put 644 "$$tmp/dev.authagent.Agent.service" "$(DBUSSERVICEDIR)/dev.authagent.Agent.service"; \
	put 644 dbus/dev.authagent.Agent.xml "$(DBUSIFACEDIR)/dev.authagent.Agent1.xml"; \
	"$$bin/authctl" --generate-completion-script bash > "$$tmp/authctl.bash"; \
	"$$bin/authctl" --generate-completion-script zsh > "$$tmp/_authctl"; \
	"$$bin/authctl" --generate-completion-script fish > "$$tmp/authctl.fish"; \
	put 644 "$$tmp/authctl.bash" "$(BASHCOMPDIR)/authctl"; \
	put 644 "$$tmp/_authctl" "$(ZSHCOMPDIR)/_authctl"; \
	put 644 "$$tmp/authctl.fish" "$(FISHCOMPDIR)/authctl.fish"; \
	put 644 docs/man/authctl.1 "$(MANDIR)/authctl.1"; \
	put 644 docs/man/auth-agent.1 "$(MANDIR)/auth-agent.1"; \
	put 644 README.md "$(DOCDIR)/README.md"; \
	for doc in $(USERDOCS); do put 644 "docs/$$doc" "$(DOCDIR)/docs/$$doc"; done; \
	echo "$(MANIFEST)" >> "$$manifest.tmp"; mv "$$manifest.tmp" "$$manifest"; \
	if [ -z "$$root" ] && systemctl --user show-environment >/dev/null 2>&1; then \
		systemctl --user daemon-reload && systemctl --user enable --now auth-agent.socket && \
		systemctl --user try-restart auth-agent.service && \
		echo "enabled auth-agent.socket (a running agent was restarted on the new binary); next: authctl login ACCOUNT (after adding it to ~/.config/auth-agent/config.toml)"; \
		if [ -f "$${XDG_CONFIG_HOME:-$$HOME/.config}/auth-agent/config.toml" ]; then \
			"$(BINDIR)/authctl" register-scheme --all || echo "could not register the private-use redirect schemes: run 'authctl register-scheme --all' once the agent runs"; \
		fi; \
	else \
		echo "no user systemd instance here (or DESTDIR set): run 'systemctl --user daemon-reload && systemctl --user enable --now auth-agent.socket' in your session (and 'authctl register-scheme --all' if an account uses a private-use redirect scheme)"; \
	fi

uninstall:
	@set -e; root="$(DESTDIR)"; manifest="$$root$(MANIFEST)"; \
	if [ ! -f "$$manifest" ]; then echo "nothing to uninstall: $$manifest not found"; exit 0; fi; \
	if [ -z "$$root" ] && systemctl --user show-environment >/dev/null 2>&1; then \
		systemctl --user disable --now auth-agent.socket auth-agent.service 2>/dev/null || true; fi; \
	while read -r path; do case "$$path" in "$(PREFIX)"/*|"$(USERUNITDIR)"/*) rm -f "$$root$$path"; echo "  removed $$root$$path";; \
		*) echo "  skipped $$path (outside PREFIX)";; esac; done < "$$manifest"; \
	rmdir "$$root$(DATADIR)/auth-agent" "$$root$(DOCDIR)/docs" "$$root$(DOCDIR)" 2>/dev/null || true; \
	if [ -z "$$root" ] && systemctl --user show-environment >/dev/null 2>&1; then systemctl --user daemon-reload; fi

# A Debian package of the release build (or of BUILT=DIR), for machines without a Swift toolchain: see scripts/deb.
deb: $(if $(BUILT),,build)
	scripts/deb "$(BUILDDIR)"

# Regenerates the committed man page from authctl's own help (swift-argument-parser's generate-manual plugin).
man:
	$(SWIFT) package --allow-writing-to-directory docs/man generate-manual --output-directory docs/man

test:
	scripts/test

demo:
	scripts/demo
