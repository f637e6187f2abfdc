#!/usr/bin/env bash
# Builds the local server image that the conformance harness uses when the official
# images (redis, postgres, etcd) cannot be pulled: a Debian bookworm tree made by
# debootstrap with redis-server, postgresql-15, pgbouncer, mariadb-server, etcd-server and zookeeper,
# imported with `docker import`. One image serves them all; the harness picks the
# entrypoint (distlock-redis, distlock-postgres, distlock-pgbouncer, distlock-mariadb,
# distlock-etcd, distlock-zookeeper). PgBouncer has
# no official image: the harness always runs it from this one. Each server's own
# client is in it too (redis-cli, pg_isready and psql, mariadb-admin and mariadb, etcdctl): the harness checks
# readiness and kills connections with them, inside the container. Where the harness
# puts certificates under /tls, Redis, PostgreSQL, MariaDB and etcd serve TLS only.
#
# Usage: scripts/build-images.sh [--force]
# Needs: root, docker, debootstrap (installed from Debian's packages when missing).
set -euo pipefail

cd "$(dirname "$0")/.."
# The tag is pinned in distlock-testservers/images.txt: bump it there whenever this
# script changes what the image holds, so that machines that kept an older image build
# the new one instead of reusing it.
IMAGE=$(awk '$1 == "local" { print $2 }' distlock-testservers/images.txt)
[[ -n "$IMAGE" ]] || { echo "build-images: no local image in distlock-testservers/images.txt" >&2; exit 1; }
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SUITE=bookworm

if [[ "${1:-}" != "--force" ]] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "build-images: $IMAGE already present"
  exit 0
fi

if ! command -v debootstrap >/dev/null 2>&1; then
  echo "build-images: installing debootstrap"
  bash "$(dirname "$0")/apt-install.sh" debootstrap
fi

work=$(mktemp -d /tmp/distlock-rootfs.XXXXXX)
trap 'umount -l "$work/rootfs/proc" 2>/dev/null || true; rm -rf "$work"' EXIT
root="$work/rootfs"

echo "build-images: debootstrap $SUITE (minbase) into $root"
debootstrap --variant=minbase --include=redis-server,postgresql-15,pgbouncer,mariadb-server,mariadb-client,etcd-server,etcd-client,zookeeper,default-jre-headless,netcat-openbsd,procps \
  "$SUITE" "$root" "$MIRROR" >"$work/debootstrap.log" 2>&1 || {
  tail -n 30 "$work/debootstrap.log"; exit 1; }

# Slim the tree: package caches, docs and locales are not needed to run servers.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
  "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/*
find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name 'en*' -exec rm -rf {} + 2>/dev/null || true
# Debian's packages start their services in the chroot's package scripts; nothing must run.
rm -rf "$root"/var/lib/postgresql/15/main "$root"/etc/postgresql/15/main "$root"/var/lib/mysql/*

install -m 0755 /dev/stdin "$root/usr/local/bin/distlock-redis" <<'SH'
#!/bin/sh
# Redis without persistence (like the official image's default): a restart loses data.
set -e
set -- --bind 0.0.0.0 --port 6379 --protected-mode no --save '' --appendonly no \
  --maxmemory-policy noeviction "$@"
# With certificates under /tls (the harness's TLS servers): TLS only, on the same port.
if [ -f /tls/server.pem ]; then
  set -- "$@" --port 0 --tls-port 6379 --tls-cert-file /tls/server.pem \
    --tls-key-file /tls/server.key --tls-ca-cert-file /tls/ca.pem --tls-auth-clients no
fi
if [ -n "${REDIS_PASSWORD:-}" ]; then set -- "$@" --requirepass "$REDIS_PASSWORD"; fi
exec /usr/bin/redis-server "$@"
SH

install -m 0755 /dev/stdin "$root/usr/local/bin/distlock-postgres" <<'SH'
#!/bin/sh
# PostgreSQL 15 with password (scram) authentication; data in /var/lib/postgresql/data
# survives a container restart, as with the official image.
set -e
PGDATA=/var/lib/postgresql/data
BIN=/usr/lib/postgresql/15/bin
mkdir -p "$PGDATA" /var/run/postgresql
chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  echo "${POSTGRES_PASSWORD:-postgres}" > /tmp/pwfile
  chown postgres /tmp/pwfile
  runuser -u postgres -- "$BIN/initdb" -D "$PGDATA" -U "${POSTGRES_USER:-postgres}" \
    --auth=scram-sha-256 --pwfile=/tmp/pwfile >/dev/null
  rm -f /tmp/pwfile
  echo "host all all 0.0.0.0/0 scram-sha-256" >> "$PGDATA/pg_hba.conf"
  echo "host all all ::/0 scram-sha-256" >> "$PGDATA/pg_hba.conf"
fi
# With certificates under /tls (the harness's TLS servers): SSL on. PostgreSQL takes a
# key file only if no one else can read it.
if [ -f /tls/server.pem ]; then
  install -o postgres -m 600 /tls/server.key /var/lib/postgresql/server.key
  set -- -c ssl=on -c ssl_cert_file=/tls/server.pem \
    -c ssl_key_file=/var/lib/postgresql/server.key "$@"
fi
exec runuser -u postgres -- "$BIN/postgres" -D "$PGDATA" -c listen_addresses='*' "$@"
SH

install -m 0755 /dev/stdin "$root/usr/local/bin/distlock-pgbouncer" <<'SH'
#!/bin/sh
# PostgreSQL (as distlock-postgres starts it) on 5432, behind PgBouncer in transaction
# pooling mode on 6432, with Debian's PgBouncer defaults otherwise. The password file
# holds the server's password, so PgBouncer authenticates clients and the server alike.
# This shell stays in front and passes a stop on to both.
set -e
/usr/local/bin/distlock-postgres &
pg=$!
mkdir -p /etc/pgbouncer
printf '"%s" "%s"\n' "${POSTGRES_USER:-postgres}" "${POSTGRES_PASSWORD:-postgres}" > /etc/pgbouncer/userlist.txt
cat > /etc/pgbouncer/pgbouncer.ini <<INI
[databases]
* = host=127.0.0.1 port=5432
[pgbouncer]
listen_addr = 0.0.0.0
listen_port = 6432
unix_socket_dir =
auth_type = scram-sha-256
auth_file = /etc/pgbouncer/userlist.txt
pool_mode = transaction
max_client_conn = 500
default_pool_size = 20
INI
chown -R postgres:postgres /etc/pgbouncer
until /usr/lib/postgresql/15/bin/pg_isready -q -h 127.0.0.1; do sleep 0.2; done
runuser -u postgres -- /usr/sbin/pgbouncer /etc/pgbouncer/pgbouncer.ini &
bouncer=$!
trap 'kill -TERM $bouncer $pg 2>/dev/null; wait $pg' TERM INT
wait $bouncer
SH

install -m 0755 /dev/stdin "$root/usr/local/bin/distlock-mariadb" <<'SH'
#!/bin/sh
# MariaDB (Debian's mariadb-server) on 3306 with a root password over TCP, as the
# official image's MARIADB_ROOT_PASSWORD and MARIADB_DATABASE set them; data in
# /var/lib/mysql survives a container restart, and InnoDB flushes every commit.
set -e
DATA=/var/lib/mysql
mkdir -p "$DATA" /run/mysqld
chown -R mysql:mysql "$DATA" /run/mysqld
if [ ! -d "$DATA/mysql" ]; then
  mariadb-install-db --user=mysql --datadir="$DATA" --skip-test-db \
    --auth-root-authentication-method=normal >/dev/null
  PW=$(printf '%s' "${MARIADB_ROOT_PASSWORD:-mariadb}" | sed "s/'/''/g")
  mariadbd --user=mysql --datadir="$DATA" --bootstrap >/dev/null <<SQL
FLUSH PRIVILEGES;
ALTER USER 'root'@'localhost' IDENTIFIED BY '$PW';
CREATE USER 'root'@'%' IDENTIFIED BY '$PW';
GRANT ALL ON *.* TO 'root'@'%' WITH GRANT OPTION;
CREATE DATABASE IF NOT EXISTS \`${MARIADB_DATABASE:-distlock}\`;
SQL
fi
# With certificates under /tls (the harness's TLS servers): TLS only, as a managed
# MySQL service that requires it (require_secure_transport).
if [ -f /tls/server.pem ]; then
  mkdir -p /etc/mysql/tls
  cp /tls/ca.pem /tls/server.pem /tls/server.key /etc/mysql/tls/
  chown -R mysql:mysql /etc/mysql/tls
  chmod 600 /etc/mysql/tls/server.key
  set -- --ssl-ca=/etc/mysql/tls/ca.pem --ssl-cert=/etc/mysql/tls/server.pem \
    --ssl-key=/etc/mysql/tls/server.key --require-secure-transport=ON "$@"
fi
exec mariadbd --user=mysql --datadir="$DATA" --bind-address=0.0.0.0 --port=3306 \
  --max-connections=500 --innodb-flush-log-at-trx-commit=1 "$@"
SH

install -m 0755 /dev/stdin "$root/usr/local/bin/distlock-etcd" <<'SH'
#!/bin/sh
# etcd (Debian's etcd-server) serving clients on 2379; data survives a restart.
set -e
# With certificates under /tls (the harness's TLS servers): TLS only, and clients must
# present a certificate the CA signed.
if [ -f /tls/server.pem ]; then
  exec /usr/bin/etcd --name "${DISTLOCK_ETCD_NAME:-default}" --data-dir /var/lib/etcd/data \
    --listen-client-urls https://0.0.0.0:2379 --advertise-client-urls https://127.0.0.1:2379 \
    --cert-file /tls/server.pem --key-file /tls/server.key \
    --client-cert-auth --trusted-ca-file /tls/ca.pem "$@"
fi
exec /usr/bin/etcd --name "${DISTLOCK_ETCD_NAME:-default}" --data-dir /var/lib/etcd/data \
  --listen-client-urls http://0.0.0.0:2379 \
  --advertise-client-urls "${DISTLOCK_ETCD_ADVERTISE:-http://127.0.0.1:2379}" "$@"
SH

install -m 0755 /dev/stdin "$root/usr/local/bin/distlock-zookeeper" <<'SH'
#!/bin/sh
# ZooKeeper (Debian's zookeeper package) serving clients on 2181, with TTL nodes
# enabled (zookeeper.extendedTypesEnabled) and the four-letter words the harness checks
# readiness with, and empty container and run-out TTL nodes deleted within a second
# or so; data in /var/lib/zookeeper survives a restart. In an ensemble,
# DISTLOCK_ZK_ID is this server's id and DISTLOCK_ZK_SERVERS its members'
# "server.N=host:2888:3888;2181" lines, separated by spaces.
set -e
DATA=/var/lib/zookeeper/data
mkdir -p "$DATA" /etc/zookeeper/distlock
cat > /etc/zookeeper/distlock/zoo.cfg <<CFG
tickTime=2000
initLimit=10
syncLimit=5
dataDir=$DATA
clientPort=2181
4lw.commands.whitelist=ruok,srvr,stat,mntr
admin.enableServer=false
CFG
if [ -n "${DISTLOCK_ZK_SERVERS:-}" ]; then
  echo "${DISTLOCK_ZK_ID:-1}" > "$DATA/myid"
  echo "quorumListenOnAllIPs=true" >> /etc/zookeeper/distlock/zoo.cfg
  for line in $DISTLOCK_ZK_SERVERS; do echo "$line" >> /etc/zookeeper/distlock/zoo.cfg; done
fi
# Debian's zookeeper.jar names its dependencies in its manifest; slf4j-simple logs to
# stderr, where the harness reads the line that says the server started.
# Empty container nodes and run-out TTL nodes are deleted every second, not every
# minute, so that what a test leaves is gone soon after.
exec java -Xmx256m -Dzookeeper.extendedTypesEnabled=true -Dorg.slf4j.simpleLogger.defaultLogLevel=info \
  -Dznode.container.checkIntervalMs=1000 -Dznode.container.maxPerMinute=600000 \
  -cp /etc/zookeeper/distlock:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar \
  org.apache.zookeeper.server.quorum.QuorumPeerMain /etc/zookeeper/distlock/zoo.cfg
SH

echo "build-images: importing $IMAGE"
tar -C "$root" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  - "$IMAGE" >/dev/null
docker image ls "$IMAGE"
