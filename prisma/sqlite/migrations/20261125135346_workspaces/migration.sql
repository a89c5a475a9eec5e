-- CreateTable
CREATE TABLE "Workspace" (
    "name" TEXT NOT NULL PRIMARY KEY,
    "root" TEXT NOT NULL,
    "createdBy" TEXT,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP
);

-- CreateTable
CREATE TABLE "WorkspaceBinding" (
    "platform" TEXT NOT NULL,
    "account" TEXT NOT NULL,
    "chatId" TEXT NOT NULL,
    "workspace" TEXT NOT NULL,
    "createdBy" TEXT,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,

    PRIMARY KEY ("platform", "account", "chatId"),
    CONSTRAINT "WorkspaceBinding_workspace_fkey" FOREIGN KEY ("workspace") REFERENCES "Workspace" ("name") ON DELETE CASCADE ON UPDATE CASCADE
);

-- CreateIndex
CREATE INDEX "WorkspaceBinding_workspace_idx" ON "WorkspaceBinding"("workspace");
