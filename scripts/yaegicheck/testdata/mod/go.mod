module example.com/mod

go 1.23

require example.com/other v0.0.0

replace example.com/other => ../other
