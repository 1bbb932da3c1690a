module github.com/segpipe/segpipe

go 1.26

require github.com/urfave/cli/v3 v3.14.0
