"""reclock's tests, one folder per package they exercise."""
