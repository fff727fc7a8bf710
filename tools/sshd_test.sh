#!/usr/bin/env bash
# A throwaway sshd for the SSH tunnel tests (tests/service/test_tunnel.py), as root, idempotent:
#   bash tools/sshd_test.sh          # start it (or find it running); prints its settings
#   bash tools/sshd_test.sh stop     # stop it
# It listens on 127.0.0.1:$SEML_TEST_SSHD_PORT (default 22022), accepts key logins for root
# only (PermitRootLogin prohibit-password), and keeps everything in $SEML_TEST_SSHD_DIR
# (default /tmp/seml-hydra-sshd): its host key, sshd_config, pid file, log, and the client keys
#   client_key                    unencrypted
#   client_key_enc, .passphrase   encrypted with a random passphrase (in client_key_enc.passphrase)
# both listed in its authorized_keys. Installs Debian's openssh-server when sshd is missing.
set -euo pipefail
PORT=${SEML_TEST_SSHD_PORT:-22022}
DIR=${SEML_TEST_SSHD_DIR:-/tmp/seml-hydra-sshd}
SSHD=/usr/sbin/sshd

# our sshd runs: the pid file names a live process that is $SSHD run with `-f` our sshd_config (a
# pid file left by an sshd that is gone may name a reused pid: CI found one naming another process;
# one naming `tail -f $DIR/sshd_config` or an editor of it is not ours either, and stop must not
# kill it)
running() {
  local pid exe
  [[ -s $DIR/sshd.pid ]] || return 1
  pid=$(tr -dc '0-9' <"$DIR/sshd.pid")
  [[ -n $pid && -r /proc/$pid/cmdline ]] || return 1
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  [[ $exe == "$SSHD" || $exe == "$SSHD (deleted)" ]] || return 1
  { tr '\0' ' ' <"/proc/$pid/cmdline"; echo; } 2>/dev/null | grep -qF -- " -f $DIR/sshd_config "
}
answers() { (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; }

if [[ ${1:-} == stop ]]; then
  if running; then kill "$(tr -dc '0-9' <"$DIR/sshd.pid")"; fi
  rm -f "$DIR/sshd.pid"
  exit 0
fi

if [[ $(id -u) != 0 ]]; then
  echo "tools/sshd_test.sh must run as root (sshd needs it)" >&2
  exit 1
fi
if [[ ! -x $SSHD ]]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y --no-install-recommends openssh-server >/dev/null 2>&1 \
    || { apt-get update -qq && apt-get install -y --no-install-recommends openssh-server >/dev/null; }
fi

umask 077
mkdir -p "$DIR" /run/sshd
chmod 700 "$DIR"
[[ -f $DIR/host_key ]] || ssh-keygen -q -t ed25519 -N '' -f "$DIR/host_key"
[[ -f $DIR/client_key ]] || ssh-keygen -q -t ed25519 -N '' -C seml-hydra-test -f "$DIR/client_key"
if [[ ! -f $DIR/client_key_enc ]]; then
  head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$DIR/client_key_enc.passphrase"
  ssh-keygen -q -t ed25519 -N "$(cat "$DIR/client_key_enc.passphrase")" -C seml-hydra-test-enc \
    -f "$DIR/client_key_enc"
fi
cat "$DIR/client_key.pub" "$DIR/client_key_enc.pub" >"$DIR/authorized_keys"
cat >"$DIR/sshd_config" <<EOF
Port $PORT
ListenAddress 127.0.0.1
HostKey $DIR/host_key
PidFile $DIR/sshd.pid
AuthorizedKeysFile $DIR/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
UsePAM no
StrictModes no
AllowTcpForwarding yes
PermitTTY no
X11Forwarding no
PrintMotd no
LogLevel INFO
EOF

if ! running; then
  rm -f "$DIR/sshd.pid"
  $SSHD -t -f "$DIR/sshd_config"
  $SSHD -f "$DIR/sshd_config" -E "$DIR/sshd.log"
  for _ in $(seq 50); do
    running && answers && break
    sleep 0.1
  done
fi
if ! { running && answers; }; then
  echo "sshd for tests does not answer on 127.0.0.1:$PORT; see $DIR/sshd.log (one of $DIR started for another port keeps running: \`bash tools/sshd_test.sh stop\` first)" >&2
  tail -5 "$DIR/sshd.log" >&2
  exit 1
fi
echo "sshd for tests: 127.0.0.1:$PORT pid $(cat "$DIR/sshd.pid"), user root, key $DIR/client_key"
