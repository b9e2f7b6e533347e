// The timeline of awr serve: fed by EventSource (docs/http.md).
