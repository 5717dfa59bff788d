//! Several daemons on one database.
