module example.com/trivial

go 1.22
