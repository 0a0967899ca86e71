# Sourced by the measurement scripts: a throwaway PostgreSQL from the
# system's binaries in a temporary directory, as the user postgres when run
# as root, removed on exit. It never reads PG* or DATABASE_URL.
#
#   . scripts/throwaway-server.sh
#   start_server PORT [-c name=value …]    # sets pgbin, tmp, as; stops on exit
unset PGHOST PGPORT PGUSER PGDATABASE PGPASSWORD PGSERVICE PGOPTIONS DATABASE_URL

pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
if [ -z "$pgbin" ]; then
  pgbin=$(dirname "$(command -v initdb)")
fi
tmp=$(mktemp -d)
as=()
if [ "$(id -u)" = 0 ]; then
  chown postgres "$tmp"
  as=(runuser -u postgres --)
fi
stop_server() {
  "${as[@]}" "$pgbin/pg_ctl" -D "$tmp/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap stop_server EXIT

# start_server PORT [settings…]: initdb and start on 127.0.0.1:PORT, the
# socket in $tmp, with the settings given (passed to postgres as -o).
start_server() {
  local port=$1
  shift
  "${as[@]}" "$pgbin/initdb" -D "$tmp/data" -U postgres -A trust >/dev/null
  "${as[@]}" "$pgbin/pg_ctl" -D "$tmp/data" -l "$tmp/log" -w \
    -o "-p $port -c listen_addresses=127.0.0.1 -k $tmp $*" start >/dev/null
}
