// esbuild bundles imported CSS into app.css; for the type checker it is a side-effect import.
declare module '*.css';
