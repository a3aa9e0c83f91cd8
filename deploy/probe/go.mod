module skiff.dev/deploy/probe

go 1.26
