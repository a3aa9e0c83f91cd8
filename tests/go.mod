module skiff.dev/tests

go 1.26.0
