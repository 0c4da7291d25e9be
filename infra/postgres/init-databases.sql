-- One Postgres for the stack, one database per service (run once, on an empty data volume).
CREATE DATABASE prefect;
CREATE DATABASE mlflow;
