module consort/client

go 1.19
