#!/usr/bin/env sh
# MariaDB for the tests (tests/contrib/conftest.py): a user `piagent` (password `piagent`)
# that may create and drop the databases named piagent_* (each test makes its own), and the
# database piagent_test. Idempotent; run as a MariaDB root that needs no password.
set -eu
mysql -h "${MARIADB_HOST:-127.0.0.1}" -P "${MARIADB_PORT:-3306}" -uroot <<'SQL'
CREATE DATABASE IF NOT EXISTS piagent_test CHARACTER SET utf8mb4;
CREATE USER IF NOT EXISTS 'piagent'@'127.0.0.1' IDENTIFIED BY 'piagent';
CREATE USER IF NOT EXISTS 'piagent'@'localhost' IDENTIFIED BY 'piagent';
GRANT ALL PRIVILEGES ON `piagent\_%`.* TO 'piagent'@'127.0.0.1';
GRANT ALL PRIVILEGES ON `piagent\_%`.* TO 'piagent'@'localhost';
FLUSH PRIVILEGES;
SQL
