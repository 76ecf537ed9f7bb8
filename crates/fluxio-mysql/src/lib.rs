//! MySQL 8 and MariaDB 10.11+ checkpoint store for fluxio (in progress).
